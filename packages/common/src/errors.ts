import { create, type JsonObject } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { ErrorDetailSchema } from "@ledger/proto/common/v1/common_pb.js";

/**
 * Stable error codes clients branch on: what the envelope's `error.code` says
 * (docs/api.md#error-codes). The RPC code decides the HTTP status, through `ERROR_STATUS`.
 */
export type ErrorCode =
  | "invalid_request"
  | "unauthenticated"
  | "permission_denied"
  | "not_found"
  | "already_exists"
  | "conflict"
  | "insufficient_funds"
  | "entity_frozen"
  | "entity_closed"
  | "entity_not_empty"
  | "too_many_alerts"
  | "balance_out_of_range"
  | "currency_mismatch"
  | "unbalanced_entries"
  | "invalid_state"
  | "hold_not_active"
  | "capture_exceeds_hold"
  | "idempotency_conflict"
  | "method_not_allowed"
  | "payload_too_large"
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

/**
 * Every RPC code's HTTP status, and the error code an error gets when it carries none of its own
 * (docs/api.md#status-mapping). The gateway answers from this table and nowhere else.
 */
export const ERROR_STATUS: { readonly [C in Code]: { readonly status: number; readonly code: ErrorCode } } = {
  [Code.InvalidArgument]: { status: 400, code: "invalid_request" },
  [Code.OutOfRange]: { status: 400, code: "invalid_request" },
  [Code.Unauthenticated]: { status: 401, code: "unauthenticated" },
  [Code.PermissionDenied]: { status: 403, code: "permission_denied" },
  [Code.NotFound]: { status: 404, code: "not_found" },
  [Code.AlreadyExists]: { status: 409, code: "already_exists" },
  [Code.Aborted]: { status: 409, code: "conflict" },
  [Code.FailedPrecondition]: { status: 422, code: "invalid_state" },
  [Code.ResourceExhausted]: { status: 429, code: "rate_limited" },
  [Code.Unavailable]: { status: 503, code: "unavailable" },
  [Code.DeadlineExceeded]: { status: 503, code: "unavailable" },
  [Code.Canceled]: { status: 500, code: "internal" },
  [Code.Unknown]: { status: 500, code: "internal" },
  [Code.Unimplemented]: { status: 500, code: "internal" },
  [Code.Internal]: { status: 500, code: "internal" },
  [Code.DataLoss]: { status: 500, code: "internal" },
};

/**
 * Error codes whose HTTP status is narrower than their RPC code's. Only the gateway raises them,
 * about HTTP itself: a known path with another method (carried as `unimplemented`, otherwise a
 * 500) and a body over the limit (`resource_exhausted`, as an RPC port refuses one).
 */
const NARROWER_STATUS: Partial<Record<ErrorCode, { rpc: Code; status: number }>> = {
  method_not_allowed: { rpc: Code.Unimplemented, status: 405 },
  payload_too_large: { rpc: Code.ResourceExhausted, status: 413 },
};

/** The HTTP status of an error: its RPC code's, or its error code's where that is narrower. */
export function httpStatusOf(err: ConnectError): number {
  const narrower = NARROWER_STATUS[errorCodeOf(err).code];
  return narrower && narrower.rpc === err.code ? narrower.status : ERROR_STATUS[err.code].status;
}

/** The error code carried by a ConnectError, or its RPC code's default from `ERROR_STATUS`. */
export function errorCodeOf(err: ConnectError): { code: ErrorCode; details?: JsonObject } {
  const [detail] = err.findDetails(ErrorDetailSchema);
  if (detail?.code) {
    return { code: detail.code as ErrorCode, details: detail.details as JsonObject | undefined };
  }
  return { code: ERROR_STATUS[err.code].code };
}
