import { ConnectError } from "@connectrpc/connect";
import { errorCodeOf, httpStatusOf } from "@ledger/common";

/**
 * The header an answer of this status takes from its error's metadata: the methods to use instead,
 * when to come back (a rate limit, or the gateway's body budget).
 */
const HEADER_OF_STATUS: Record<number, string> = { 405: "allow", 429: "retry-after", 503: "retry-after" };

/**
 * The error envelope for any failure, with its status from the one table in @ledger/common
 * (docs/api.md#status-mapping) and the headers the error asks for. Server-side failures get a
 * fixed message: whatever went wrong inside (a database error, a bug) is in the logs under the
 * request id, never in the body.
 */
export function errorEnvelope(err: unknown, requestId: string): { status: number; body: object; headers: Record<string, string> } {
  const error = ConnectError.from(err);
  const status = httpStatusOf(error);
  const headers: Record<string, string> = {};
  const name = HEADER_OF_STATUS[status];
  const value = name ? error.metadata.get(name) : null;
  if (name && value) headers[name] = value;
  if (status >= 500) {
    const message =
      status === 503
        ? `the service is temporarily unavailable; retry with the same Idempotency-Key (request ${requestId})`
        : `internal error; the request id is ${requestId}`;
    return { status, body: { status: "error", error: { code: status === 503 ? "unavailable" : "internal", message } }, headers };
  }
  const { code, details } = errorCodeOf(error);
  return {
    status,
    body: { status: "error", error: { code, message: error.rawMessage, ...(details ? { details } : {}) } },
    headers,
  };
}
