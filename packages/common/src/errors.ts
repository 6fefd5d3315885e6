import { create, type JsonObject } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { ErrorDetailSchema } from "@ledger/proto/common/v1/common_pb.js";

/**
 * Stable error codes clients branch on. The RPC code decides the HTTP status in the gateway;
 * this string is what the envelope's `error.code` says.
 */
export type ErrorCode =
  | "invalid_request"
  | "unauthenticated"
  | "permission_denied"
  | "not_found"
  | "already_exists"
  | "conflict"
  | "insufficient_funds"
  | "balance_out_of_range"
  | "currency_mismatch"
  | "unbalanced_entries"
  | "invalid_state"
  | "hold_not_active"
  | "capture_exceeds_hold"
  | "idempotency_conflict"
  | "rate_limited"
  | "unavailable"
  | "internal";

/**
 * The one way services raise an error a client should see: a ConnectError carrying an
 * ErrorDetail, whose message is written for the client and never contains SQL or a stack.
 */
export function appError(code: Code, errorCode: ErrorCode, message: string, details?: JsonObject, cause?: unknown): ConnectError {
  const detail = create(ErrorDetailSchema, { code: errorCode });
  if (details) detail.details = details;
  return new ConnectError(message, code, undefined, [{ desc: ErrorDetailSchema, value: detail }], cause);
}

/** A request that can never succeed as sent: a missing field, a wrong value. */
export function invalidArgument(message: string, details?: JsonObject): ConnectError {
  return appError(Code.InvalidArgument, "invalid_request", message, details);
}

/** An object that does not exist, or belongs to another account: both answer the same. */
export function notFound(what: string, id?: string): ConnectError {
  const message = id ? `${what} ${id} was not found` : `${what} was not found`;
  return appError(Code.NotFound, "not_found", message, id ? { id } : undefined);
}

/** A business rule refused a well-formed request (HTTP 422 at the gateway). */
export function ruleViolation(errorCode: ErrorCode, message: string, details?: JsonObject): ConnectError {
  return appError(Code.FailedPrecondition, errorCode, message, details);
}

/** The error code carried by a ConnectError, or one derived from its RPC code. */
export function errorCodeOf(err: ConnectError): { code: ErrorCode; details?: JsonObject } {
  const [detail] = err.findDetails(ErrorDetailSchema);
  if (detail && detail.code) {
    return { code: detail.code as ErrorCode, details: detail.details as JsonObject | undefined };
  }
  return { code: defaultErrorCode(err.code) };
}

function defaultErrorCode(code: Code): ErrorCode {
  switch (code) {
    case Code.InvalidArgument:
    case Code.OutOfRange:
      return "invalid_request";
    case Code.Unauthenticated:
      return "unauthenticated";
    case Code.PermissionDenied:
      return "permission_denied";
    case Code.NotFound:
      return "not_found";
    case Code.AlreadyExists:
      return "already_exists";
    case Code.Aborted:
      return "conflict";
    case Code.FailedPrecondition:
      return "invalid_state";
    case Code.ResourceExhausted:
      return "rate_limited";
    case Code.Unavailable:
    case Code.DeadlineExceeded:
      return "unavailable";
    default:
      return "internal";
  }
}
