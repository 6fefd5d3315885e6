import type { IncomingMessage } from "node:http";
import { Code, type ConnectError } from "@connectrpc/connect";
import { appError, invalidArgument } from "@ledger/common";

/** Reads a request body up to `limit` bytes; a larger one is refused with 413 before it is all read. */
export async function readBody(req: IncomingMessage, limit: number): Promise<Buffer> {
  const declared = Number(req.headers["content-length"] ?? "0");
  if (declared > limit) throw payloadTooLarge(limit);
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > limit) throw payloadTooLarge(limit);
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}

/** 413: the rest of the body is never read, so the connection closes after the answer. */
function payloadTooLarge(limit: number): ConnectError {
  const err = appError(Code.ResourceExhausted, "payload_too_large", `the request body is larger than ${limit} bytes`);
  err.metadata.set("connection", "close");
  return err;
}

/** 405: a known path asked with another method; `Allow` lists the ones it takes. */
export function methodNotAllowed(method: string, path: string, allowed: string[]): ConnectError {
  const err = appError(Code.Unimplemented, "method_not_allowed", `${method} is not allowed on ${path}; use ${allowed.join(" or ")}`);
  err.metadata.set("allow", allowed.join(", "));
  return err;
}

/** Parses a JSON body; malformed JSON is a 400 that says where it broke. */
export function parseJsonBody(raw: Buffer): unknown {
  if (raw.length === 0) return {};
  try {
    return JSON.parse(raw.toString("utf8"));
  } catch (err) {
    throw invalidArgument(`the request body is not valid JSON: ${(err as Error).message}`);
  }
}
