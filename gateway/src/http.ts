import type { IncomingMessage } from "node:http";
import { Code, ConnectError } from "@connectrpc/connect";
import { appError, invalidArgument } from "@ledger/common";
import { parseRequestJson } from "./json.js";

/**
 * The bytes of request bodies one process reads at once, over all its requests: what keeps a
 * flood of large bodies from holding the process's memory (GATEWAY_BODY_BUDGET_BYTES).
 */
export interface BodyBudget {
  /** One request's share, empty until its body is read; `release` gives back what it took. */
  lease(): BodyLease;
}

/** What one request holds of the budget. */
export interface BodyLease {
  /** Takes `bytes` more, or throws the 503 when the budget has not that much left. */
  take(bytes: number): void;
  /** Gives back everything taken; idempotent. */
  release(): void;
}

/** A budget of `total` bytes. */
export function createBodyBudget(total: number): BodyBudget {
  let free = total;
  return {
    lease() {
      let held = 0;
      return {
        take(bytes) {
          if (bytes > free) throw bodyBudgetSpent();
          free -= bytes;
          held += bytes;
        },
        release() {
          free += held;
          held = 0;
        },
      };
    },
  };
}

/** 503 with Retry-After: the body is not read; other requests' bodies use the budget now. */
function bodyBudgetSpent(): ConnectError {
  const err = appError(Code.Unavailable, "unavailable", "the gateway is reading as many request bodies as it may at once; retry in 1 s");
  err.metadata.set("retry-after", "1");
  return err;
}

/**
 * Reads a request body up to `limit` bytes, taking its bytes from `lease` before they are read (a
 * declared Content-Length at once, a chunked body as it comes). A larger body is refused with 413
 * and one the budget has no room for with 503, both without reading further: the rest is left
 * unread (and dropped as it arrives) until the answer closes the connection.
 */
export function readBody(req: IncomingMessage, limit: number, lease: BodyLease): Promise<Buffer> {
  const declared = Number(req.headers["content-length"] ?? "0");
  if (declared > limit) throw payloadTooLarge(limit);
  lease.take(declared);
  // Events rather than `for await`: leaving that loop early destroys the socket, so the client
  // would get no answer at all.
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let taken = declared;
    const stop = () => {
      req.off("data", onData);
      req.off("end", onEnd);
      req.off("error", onError);
      req.off("close", onClose);
    };
    const fail = (err: unknown) => {
      stop();
      reject(err);
    };
    function onData(chunk: Buffer) {
      size += chunk.length;
      try {
        if (size > limit) throw payloadTooLarge(limit);
        if (size > taken) {
          lease.take(size - taken);
          taken = size;
        }
      } catch (err) {
        fail(err);
        return;
      }
      chunks.push(chunk);
    }
    function onEnd() {
      stop();
      resolve(Buffer.concat(chunks, size));
    }
    const onError = (err: Error) => fail(err);
    const onClose = () => fail(new Error("the client closed the connection before the end of the body"));
    req.on("data", onData);
    req.on("end", onEnd);
    req.on("error", onError);
    req.on("close", onClose);
  });
}

/** 413: the rest of the body is never read. */
function payloadTooLarge(limit: number): ConnectError {
  return appError(Code.ResourceExhausted, "payload_too_large", `the request body is larger than ${limit} bytes`);
}

/** 405: a known path asked with another method; `Allow` lists the ones it takes. */
export function methodNotAllowed(method: string, path: string, allowed: string[]): ConnectError {
  const err = appError(Code.Unimplemented, "method_not_allowed", `${method} is not allowed on ${path}; use ${allowed.join(" or ")}`);
  err.metadata.set("allow", allowed.join(", "));
  return err;
}

/**
 * Parses a JSON body; malformed JSON is a 400 that says where it broke, and so is JSON that
 * JSON.parse would take with a silent guess: a key given twice in one object, or a NUL character
 * (json.ts, parseRequestJson).
 */
export function parseJsonBody(raw: Buffer): unknown {
  if (raw.length === 0) return {};
  try {
    return parseRequestJson(raw.toString("utf8"));
  } catch (err) {
    if (err instanceof ConnectError) throw err;
    throw invalidArgument(`the request body is not valid JSON: ${(err as Error).message}`);
  }
}
