import { Code, ConnectError } from "@connectrpc/connect";
import { errorCodeOf } from "@ledger/common";

/** HTTP status of an RPC code (docs/api.md#status-mapping). */
export function httpStatusOf(code: Code): number {
  switch (code) {
    case Code.InvalidArgument:
    case Code.OutOfRange:
      return 400;
    case Code.Unauthenticated:
      return 401;
    case Code.PermissionDenied:
      return 403;
    case Code.NotFound:
      return 404;
    case Code.AlreadyExists:
    case Code.Aborted:
      return 409;
    case Code.FailedPrecondition:
      return 422;
    case Code.ResourceExhausted:
      return 429;
    case Code.Unavailable:
    case Code.DeadlineExceeded:
      return 503;
    default:
      return 500;
  }
}

/**
 * The error envelope for any failure. Server-side failures get a fixed message: whatever went
 * wrong inside (a database error, a bug) is in the logs under the request id, never in the body.
 */
export function errorEnvelope(err: unknown, requestId: string): { status: number; body: object } {
  const error = ConnectError.from(err);
  const status = httpStatusOf(error.code);
  const { code, details } = errorCodeOf(error);
  if (status >= 500) {
    const message =
      status === 503
        ? `the service is temporarily unavailable; retry with the same Idempotency-Key (request ${requestId})`
        : `internal error; the request id is ${requestId}`;
    return { status, body: { status: "error", error: { code: status === 503 ? "unavailable" : "internal", message } } };
  }
  return {
    status,
    body: { status: "error", error: { code, message: error.rawMessage, ...(details ? { details } : {}) } },
  };
}
