import { create } from "@bufbuild/protobuf";
import { TimestampSchema, type Timestamp } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { errorCodeOf, newId } from "@ledger/common";
import { refusalHandlers, type ApiResponse } from "@ledger/e2e";
import { LedgerService, type EntityStatus, type TransactionStatus } from "@ledger/proto/ledger/v1/ledger_pb.js";
import { describe, expect, it } from "vitest";

// The filters of the three lists refused out of bounds, at the REST edge (naming the query
// parameter) and at the RPC edge (naming the field), before anything is read: the handlers run in
// memory with nothing behind them, and refusalHandlers checks after each test that nothing was
// reached. What the filters select is list-filters.test.ts, on a full stack.

const handlers = refusalHandlers();

/** Each list with the parameters it needs besides the filters. */
const LISTS: Array<[string, Record<string, string>]> = [
  ["/entities", {}],
  ["/transactions", { entity_id: newId("entity") }],
  ["/transaction/groups", {}],
];

function expectRefused(res: ApiResponse, parameter: string, why: string): void {
  expect(res.status, `${why}: ${JSON.stringify(res.body)}`).toBe(400);
  expect(res.body.status).toBe("error");
  expect(res.body.error.code).toBe("invalid_request");
  expect(res.body.error.details?.parameter, why).toBe(parameter);
}

/** A query string written out, so a test controls repeats and encodings exactly. */
async function get(path: string, query: string) {
  return handlers().api.request("GET", `${path}?${query}`);
}

describe("REST list filters out of bounds", () => {
  const long = (n: number) => "k".repeat(n);
  const elevenFilters = Array.from({ length: 11 }, (_, i) => `metadata%5Bk${i}%5D=v`).join("&");
  const cases: Array<[string, string, string]> = [
    ["an unknown parameter", "colour=red", "colour"],
    ["a bracketed name other than metadata", "entity_type%5Bx%5D=y", "entity_type[x]"],
    ["metadata without a key", "metadata=x", "metadata"],
    ["an empty key", "metadata%5B%5D=x", "metadata"],
    ["eleven metadata filters", elevenFilters, "metadata"],
    ["a key of 257 characters", `metadata%5B${long(257)}%5D=x`, "metadata"],
    ["a value of 1,001 characters", `metadata%5Bk%5D=${long(1001)}`, "metadata[k]"],
    ["a key given twice", "metadata%5Bk%5D=1&metadata%5Bk%5D=2", "metadata[k]"],
    ["the key __proto__", "metadata%5B__proto__%5D=x", "metadata"],
    ["a time that is not ISO 8601", "created_after=yesterday", "created_after"],
    ["a date without a time", "created_after=2026-11-01", "created_after"],
    ["a time without a time zone", "created_before=2026-11-01T00:00:00", "created_before"],
    ["a 30 February", "created_after=2026-02-30T00:00:00Z", "created_after"],
    ["a 24th hour", "created_before=2026-11-01T24:00:00Z", "created_before"],
    ["a tenth digit of a second's fraction", "created_after=2026-11-01T00:00:00.0000000001Z", "created_after"],
    ["the year 0", "created_after=0000-06-01T00:00:00Z", "created_after"],
    ["created_after equal to created_before", "created_after=2026-11-01T00:00:00Z&created_before=2026-11-01T00:00:00Z", "created_after"],
    ["created_after after created_before", "created_after=2026-11-02T00:00:00Z&created_before=2026-11-01T00:00:00Z", "created_after"],
    // The same instant written in two zones: offsets are applied before the two are compared.
    ["the same instant in two zones", "created_after=2026-11-01T01:00:00%2B01:00&created_before=2026-11-01T00:00:00Z", "created_after"],
  ];

  for (const [path, base] of LISTS) {
    it.each(cases)(`GET ${path}: %s answers 400 naming the parameter`, async (why, query, parameter) => {
      const rest = new URLSearchParams(base).toString();
      expectRefused(await get(path, [rest, query].filter(Boolean).join("&")), parameter, why);
    });
  }

  it.each([
    ["empty", "name="],
    ["blank", "name=%20%20%20"],
    ["of 101 characters", `name=${long(101)}`],
    ["of 101 characters inside spaces", `name=%20${long(101)}%20`],
    ["given twice", "name=ab&name=cd"],
  ])("GET /entities refuses a name filter %s, answering 400 naming the parameter", async (why, query) => {
    const res = await get("/entities", query);
    expectRefused(res, "name", why);
  });

  it("says how long a name filter may be, and takes it only on the entity list", async () => {
    const res = await get("/entities", `name=${long(101)}`);
    expectRefused(res, "name", "too long");
    expect(res.body.error.details).toMatchObject({ max_length: 100 });
    expectRefused(await get("/transaction/groups", "name=x"), "name", "a name filter on groups");
  });

  it("refuses a status that is not one of the list's", async () => {
    expectRefused(await get("/entities", "status=pending"), "status", "a transaction status on entities");
    expectRefused(await get("/transaction/groups", "status=frozen"), "status", "an entity status on groups");
  });
});

describe("RPC list filters out of bounds", () => {
  const ledger = () => createClient(LedgerService, handlers().ledger);
  const call = () => ({ headers: { authorization: handlers().apiKey } });
  const at = (seconds: bigint, nanos = 0) => create(TimestampSchema, { seconds, nanos });
  type Filters = { metadata?: Record<string, string>; createdAfter?: Timestamp; createdBefore?: Timestamp };
  const cases: Array<[string, Filters, string]> = [
    ["eleven metadata filters", { metadata: Object.fromEntries(Array.from({ length: 11 }, (_, i) => [`k${i}`, "v"])) }, "metadata"],
    ["an empty key", { metadata: { "": "x" } }, "metadata"],
    ["a key of 257 characters", { metadata: { ["k".repeat(257)]: "x" } }, "metadata"],
    ["a value of 1,001 characters", { metadata: { k: "v".repeat(1001) } }, "metadata.k"],
    ["a time before year 1", { createdAfter: at(-62_135_596_801n) }, "created_after"],
    ["a time after year 9999", { createdBefore: at(253_402_300_800n) }, "created_before"],
    ["nanos out of range", { createdAfter: at(0n, 1_000_000_000) }, "created_after"],
    ["created_after not earlier", { createdAfter: at(100n, 5), createdBefore: at(100n, 5) }, "created_after"],
  ];

  it.each(cases)("ListEntities, ListTransactions and ListTransactionGroups refuse %s naming the field", async (_why, filters, field) => {
    const calls = [
      ledger().listEntities(filters, call()),
      ledger().listTransactions({ ...filters, entityId: newId("entity") }, call()),
      ledger().listTransactionGroups(filters, call()),
    ];
    for (const outcome of await Promise.allSettled(calls)) {
      expect(outcome.status).toBe("rejected");
      const error = ConnectError.from((outcome as PromiseRejectedResult).reason);
      expect(error.code).toBe(Code.InvalidArgument);
      expect(errorCodeOf(error)).toMatchObject({ code: "invalid_request", details: { field } });
    }
  });

  it.each([
    ["empty", ""],
    ["blank", " \t "],
    ["of 101 characters", "n".repeat(101)],
  ])("ListEntities refuses a name filter %s as invalid_argument naming the field", async (_why, name) => {
    const error = await ledger()
      .listEntities({ name }, call())
      .then(
        () => undefined,
        (err: unknown) => ConnectError.from(err),
      );
    expect(error?.code).toBe(Code.InvalidArgument);
    expect(error && errorCodeOf(error)).toMatchObject({ code: "invalid_request", details: { field: "name", max_length: 100 } });
  });

  it("refuses a status number outside the enum", async () => {
    for (const pending of [
      ledger().listEntities({ status: 9 as EntityStatus }, call()),
      ledger().listTransactionGroups({ status: 9 as TransactionStatus }, call()),
    ]) {
      const error = await pending.then(
        () => undefined,
        (err: unknown) => ConnectError.from(err),
      );
      expect(error?.code).toBe(Code.InvalidArgument);
      expect(error && errorCodeOf(error).details).toMatchObject({ field: "status" });
    }
  });
});
