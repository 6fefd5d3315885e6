import type { IncomingMessage } from "node:http";
import { invalidArgument } from "@ledger/common";

/** Reads a request body up to `limit` bytes; a larger one is refused with 413 before it is all read. */
export async function readBody(req: IncomingMessage, limit: number): Promise<Buffer> {
  const declared = Number(req.headers["content-length"] ?? "0");
  if (declared > limit) throw new PayloadTooLarge(limit);
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > limit) throw new PayloadTooLarge(limit);
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}

/** Marks the 413 case; the gateway maps it to HTTP 413 rather than 400. */
export class PayloadTooLarge extends Error {
  constructor(readonly limit: number) {
    super(`the request body is larger than ${limit} bytes`);
  }
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
