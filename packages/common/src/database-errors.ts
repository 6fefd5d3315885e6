// What a client sees of an error that was not raised for it, database errors above all: each
// Postgres or connection failure mapped to its documented answer (docs/api.md#status-mapping).
import { Code, ConnectError } from "@connectrpc/connect";
import { MAX_BALANCE } from "./amounts.js";
import { sqlState } from "./db.js";
import { appError } from "./errors.js";

/** The ledger's check that keeps every balance within ±MAX_BALANCE (services/ledger/migrations/0008_balances_within_json_integers.sql). */
const BALANCE_RANGE_CONSTRAINT = "entity_balances_within_json_integers";
/** The ledger's checks of a frozen and a closed entity (services/ledger/migrations/0010_entity_status.sql). */
const FROZEN_CONSTRAINT = "frozen_entity_not_debited";
const CLOSED_CONSTRAINT = "closed_entity_is_empty";

/**
 * What a client may see of an error. Deliberate errors pass through; anything else (a database
 * error, a bug) becomes a bare `internal` whose cause stays in the log, so no SQL text or stack
 * ever crosses the wire.
 */
export function clientSafeError(err: unknown): ConnectError {
  if (err instanceof ConnectError) return err;
  const state = sqlState(err);
  if (state === "40001" || state === "40P01") {
    return appError(Code.Aborted, "conflict", "the request conflicted with a concurrent one; retry it", undefined, err);
  }
  if ((state === "23514" && (err as { constraint_name?: string }).constraint_name === BALANCE_RANGE_CONSTRAINT) || state === "22003") {
    // A balance past its bound (or past bigint's, which lies beyond it): the ledger's own check
    // (money-rules.ts) names the entity first; this covers what only the database could see, an
    // external entity's balance moved by another process's writes.
    return appError(
      Code.FailedPrecondition,
      "balance_out_of_range",
      `a balance would go past ±${MAX_BALANCE}, the bound of every balance; nothing was changed`,
      { limit: Number(MAX_BALANCE) },
      err,
    );
  }
  const constraint = state === "23514" ? (err as { constraint_name?: string }).constraint_name : undefined;
  if (constraint === FROZEN_CONSTRAINT || constraint === CLOSED_CONSTRAINT) {
    // An entity's status caught what the money rules should have refused first.
    const frozen = constraint === FROZEN_CONSTRAINT;
    return appError(
      Code.FailedPrecondition,
      frozen ? "entity_frozen" : "entity_closed",
      frozen ? "the entity is frozen; it takes no new debits" : "the entity is closed",
      undefined,
      err,
    );
  }
  if (state === "23514") {
    // A balance check constraint caught what the code should have refused first.
    return appError(Code.FailedPrecondition, "insufficient_funds", "the entity does not have enough available funds", undefined, err);
  }
  if (databaseAway(state)) {
    return appError(Code.Unavailable, "unavailable", "a dependency of the service is unavailable; retry shortly", undefined, err);
  }
  return new ConnectError("internal error", Code.Internal, undefined, undefined, err);
}

/**
 * Codes of postgres.js errors that say the database went away or cannot be reached now (a
 * restart, a failover, a terminated backend): the call may be retried with the same
 * Idempotency-Key, since a transaction cut off before its COMMIT was answered either committed
 * whole, and its stored response answers the retry, or not at all.
 */
const DATABASE_AWAY = new Set([
  // postgres.js's own: its socket closed, or the pool ended or destroyed it under the query.
  "CONNECTION_CLOSED",
  "CONNECTION_ENDED",
  "CONNECTION_DESTROYED",
  "CONNECT_TIMEOUT",
  // The operating system's, from the socket.
  "ECONNREFUSED",
  "ECONNRESET",
  "EPIPE",
  "ETIMEDOUT",
  // Postgres's: admin_shutdown, crash_shutdown, cannot_connect_now (starting up or shutting down).
  "57P01",
  "57P02",
  "57P03",
]);

/** Whether an error code says the database is away; class 08 is Postgres's connection exceptions. */
function databaseAway(code: string | undefined): boolean {
  return code !== undefined && (code.startsWith("08") || DATABASE_AWAY.has(code));
}
