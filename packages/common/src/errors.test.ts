import { readFileSync } from "node:fs";
import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { appError, ERROR_STATUS, errorCodeOf, httpStatusOf } from "./errors.js";

// The table in errors.ts against the two tables of docs/api.md#errors, so neither drifts.
const API_DOC = readFileSync(new URL("../../../docs/api.md", import.meta.url), "utf8");

/** The rows of the markdown table under `heading`, as cells. */
function tableRows(heading: string): string[][] {
  const section = API_DOC.slice(API_DOC.indexOf(heading));
  const lines = section.split("\n").slice(1);
  const start = lines.findIndex((line) => line.startsWith("|"));
  const rows: string[][] = [];
  for (const line of lines.slice(start + 2)) {
    if (!line.startsWith("|")) break;
    rows.push(
      line
        .split("|")
        .slice(1, -1)
        .map((cell) => cell.trim()),
    );
  }
  return rows;
}

const statusMapping = tableRows("### Status mapping");
const errorCodes = new Map(tableRows("### Error codes").map(([code, status]) => [code!.replace(/`/g, ""), Number(status)]));

/** `InvalidArgument` as the docs write it: `invalid_argument`. */
const snake = (code: Code) => Code[code].replace(/(?<!^)([A-Z])/g, "_$1").toLowerCase();

/** The documented status for a Connect code: its own row, or the "anything else" row. */
function documentedStatus(code: Code): number {
  const row =
    statusMapping.find(([codes]) => codes!.includes("`" + snake(code) + "`")) ?? statusMapping.find(([codes]) => codes === "anything else");
  return Number(row![1]);
}

describe("the error table", () => {
  const codes = Object.values(Code).filter((c): c is Code => typeof c === "number");

  it("covers every Connect code", () => {
    expect(codes.length).toBe(16);
    for (const code of codes) expect(ERROR_STATUS[code], Code[code]).toBeDefined();
  });

  it.each(codes.map((code) => [Code[code], code] as const))("maps %s to its documented status and error code", (_name, code) => {
    const { status, code: errorCode } = ERROR_STATUS[code];
    expect(status).toBe(documentedStatus(code));
    expect(errorCodes.get(errorCode), `${errorCode} in docs/api.md#error-codes`).toBe(status);
    const bare = new ConnectError("no detail", code);
    expect(httpStatusOf(bare)).toBe(status);
    expect(errorCodeOf(bare).code).toBe(errorCode);
  });

  it("answers the gateway's own 405 and 413 only with their RPC code", () => {
    expect(httpStatusOf(appError(Code.Unimplemented, "method_not_allowed", "x"))).toBe(405);
    expect(httpStatusOf(appError(Code.ResourceExhausted, "payload_too_large", "x"))).toBe(413);
    expect(errorCodes.get("method_not_allowed")).toBe(405);
    expect(errorCodes.get("payload_too_large")).toBe(413);
    // A service's error code never moves its RPC code's status.
    expect(httpStatusOf(appError(Code.Internal, "payload_too_large", "x"))).toBe(500);
    expect(httpStatusOf(appError(Code.ResourceExhausted, "rate_limited", "x"))).toBe(429);
  });

  it("keeps a service's own error code and status", () => {
    const err = appError(Code.FailedPrecondition, "insufficient_funds", "short", { available: 1 });
    expect(httpStatusOf(err)).toBe(422);
    expect(errorCodeOf(err)).toEqual({ code: "insufficient_funds", details: { available: 1 } });
  });
});
