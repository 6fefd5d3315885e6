// Step one of each hold operation: the intent, recorded under the client's idempotency key in a
// group-committed transaction (group-commit.ts). A repeat of the call replays the answer its first
// request's completion stored (hold-completions.ts).
import { isId, notFound, ruleViolation, startIdempotentOperation, type CallOrigin, type KeyClaim, type Tx } from "@ledger/common";
import type { HoldDeps } from "./hold-completions.js";
import { operations, visibleStatus, type CaptureRow, type HoldRow } from "./hold-rows.js";

/** Idempotency of one call: the key and a fingerprint of the request. */
export interface Idempotency {
  key: string;
  fingerprint: Buffer;
}

/** A client's call to create a hold. */
export interface CreateHold {
  accountId: string;
  programId: string;
  entityId: string;
  amount: bigint;
  expiresAt?: Date;
  description: string;
  idempotency?: Idempotency;
  origin: CallOrigin;
}

/** A client's call to capture part or all of a hold. */
export interface CaptureHold {
  accountId: string;
  programId: string;
  holdId: string;
  amount: bigint;
  destinationEntityId: string;
  description: string;
  idempotency?: Idempotency;
  origin: CallOrigin;
}

/** A client's call to release a hold. */
export interface ReleaseHold {
  accountId: string;
  programId: string;
  holdId: string;
  idempotency?: Idempotency;
  origin: CallOrigin;
}

/** What recording an intent needs: the database for a duplicate's wait, and group commit. */
type IntentDeps = Pick<HoldDeps, "sql" | "commits">;

export function keyClaim(accountId: string, idempotency: Idempotency | undefined): KeyClaim | undefined {
  return idempotency && { accountId, ...idempotency };
}

/**
 * What a step touches, for group commit: steps on one hold, or with one client key, never share a
 * transaction (see group-commit.ts).
 */
const touching = (holdId: string, idempotency?: KeyClaim) =>
  idempotency ? [holdId, `key:${idempotency.accountId}\u0000${idempotency.key}`] : [holdId];

/** `startIdempotentOperation`'s transaction, in a group-committed one. */
const sharedTransaction =
  ({ commits }: IntentDeps, keys: string[]) =>
  <R>(work: (tx: Tx, writes: Promise<unknown>[]) => Promise<R>) =>
    commits.transaction(keys, work);

/** The hold, when the caller may see it: another account's, another program's or an unfinished one is not found. */
function visibleHold(row: HoldRow | undefined, accountId: string, holdId: string, programId: string): HoldRow {
  if (!row || row.account_id !== accountId || row.status === "creating" || (programId !== "" && row.program_id !== programId)) {
    throw notFound("hold", holdId);
  }
  return row;
}

/**
 * Refuses a capture or release of a hold that cannot take one: captured or released, or past its
 * `expires_at`. From `expires_at` on, by the database's clock, a hold answers as the expiry leaves
 * it, released, whether or not the expiry has run yet (docs/architecture.md#hold-intents-and-recovery).
 * `pastExpiry` says whether the database's clock, read under the hold's lock, has reached `expires_at`.
 */
function refuseInactive(hold: HoldRow, pastExpiry: boolean, action: "captured" | "released"): void {
  const expired = hold.status === "released" ? hold.release_reason === "expired" : pastExpiry && hold.status !== "captured";
  if (expired) {
    throw ruleViolation("hold_not_active", `hold ${hold.id} expired at ${hold.expires_at!.toISOString()}; it can no longer be ${action}`, {
      status: "released",
    });
  }
  if (hold.status === "captured" || hold.status === "released") {
    throw ruleViolation("hold_not_active", `hold ${hold.id} is ${hold.status}; only held or partially captured holds can be ${action}`, {
      status: hold.status,
    });
  }
}

/**
 * Whether the database's clock has reached the hold's `expires_at`, as a column of a statement
 * that runs after the statement locking the hold: `clock_timestamp()` is the time then, where
 * `now()` is when the (shared) transaction began, maybe long before the lock was granted.
 */
const pastExpiryColumn = (tx: Tx, holdId: string) =>
  tx`coalesce((select expires_at <= clock_timestamp() from holds where id = ${holdId}), false)`;

/** Records hold `id` in `creating` under the call's key; its value is the row, sent with the COMMIT. */
export function startCreate(deps: IntentDeps, id: string, args: CreateHold, claim: KeyClaim | undefined) {
  return startIdempotentOperation({
    sql: deps.sql,
    transaction: sharedTransaction(deps, touching(id, claim)),
    claim,
    start: async (tx, writes) => {
      // Sent with the COMMIT, not awaited here: the intent costs no round trip of its own.
      const intent = tx<HoldRow[]>`
        insert into holds (id, account_id, program_id, entity_id, amount, status, expires_at, description)
        values (${id}, ${args.accountId}, ${args.programId}, ${args.entityId}, ${args.amount}, 'creating', ${args.expiresAt ?? null}, ${args.description})
        returning *`.execute();
      writes.push(intent);
      return { operation: operations.create(id), value: intent };
    },
  });
}

/** Records a pending capture of the hold under the call's key, once the hold can take it. */
export function startCapture(deps: IntentDeps, args: CaptureHold, claim: KeyClaim | undefined) {
  return startIdempotentOperation({
    sql: deps.sql,
    transaction: sharedTransaction(deps, touching(args.holdId, claim)),
    claim,
    start: async (tx, writes) => {
      // Sent together: the captures and the clock are read after the hold's lock is granted,
      // each statement with a snapshot of its own, so a capture committed while this waited for
      // the lock counts, and no capture is recorded once expires_at has come.
      const locking = tx<HoldRow[]>`select * from holds where id = ${args.holdId} for update`.execute();
      const reading = tx<{ total: bigint; n: bigint; past_expiry: boolean }[]>`
        select coalesce(sum(amount) filter (where status = 'pending'), 0)::int8 as total, count(*)::int8 as n,
          ${pastExpiryColumn(tx, args.holdId)} as past_expiry
        from captures where hold_id = ${args.holdId}`.execute();
      const [[row], [pending]] = await Promise.all([locking, reading]);
      const hold = visibleHold(row, args.accountId, args.holdId, args.programId);
      refuseInactive(hold, pending!.past_expiry, "captured");
      refuseExcessCapture(hold, args.amount, pending!.total);
      const capture: CaptureRow = {
        id: `${hold.id}:${pending!.n + 1n}`,
        hold_id: hold.id,
        amount: args.amount,
        destination_entity_id: args.destinationEntityId,
        description: args.description || `Capture of ${hold.id}`,
        status: "pending",
        transaction_group_id: null,
        // The database's clock stamps the row (recovery compares it with now()); this is for the caller only.
        created_at: new Date(),
      };
      writes.push(
        tx`
        insert into captures (id, hold_id, amount, destination_entity_id, description, status)
        values (${capture.id}, ${capture.hold_id}, ${capture.amount}, ${capture.destination_entity_id}, ${capture.description}, 'pending')`.execute(),
      );
      return { operation: operations.capture(capture.id), value: { hold, capture } };
    },
  });
}

/** Refuses a capture of a hold being released, or of more than is left on it after the pending captures. */
function refuseExcessCapture(hold: HoldRow, amount: bigint, pending: bigint): void {
  if (hold.status === "releasing") {
    throw ruleViolation(
      "hold_not_active",
      `hold ${hold.id} is ${visibleStatus(hold)} and being released; only held or partially captured holds can be captured`,
      { status: visibleStatus(hold) },
    );
  }
  const remaining = hold.amount - hold.captured_amount - pending;
  if (amount > remaining) {
    throw ruleViolation("capture_exceeds_hold", `the capture of ${amount} exceeds the ${remaining} remaining on hold ${hold.id}`, {
      remaining: Number(remaining),
      requested: Number(amount),
    });
  }
}

/**
 * Puts the hold in `releasing` under the call's key, once no capture of it is pending; a requested
 * release already in flight is joined instead. Its value is the hold in `releasing`.
 */
export function startRelease(deps: IntentDeps, args: ReleaseHold, claim: KeyClaim | undefined) {
  return startIdempotentOperation({
    sql: deps.sql,
    transaction: sharedTransaction(deps, touching(args.holdId, claim)),
    claim,
    start: async (tx) => {
      if (!isId("hold", args.holdId)) throw notFound("hold", args.holdId);
      // Sent together, as a capture's intent does: the pending captures and the clock are read
      // after the hold's lock is granted.
      const locking = tx<HoldRow[]>`select * from holds where id = ${args.holdId} for update`.execute();
      const reading = tx<{ capturing: boolean; past_expiry: boolean }[]>`
        select exists (select 1 from captures where hold_id = ${args.holdId} and status = 'pending') as capturing,
          ${pastExpiryColumn(tx, args.holdId)} as past_expiry`.execute();
      const [[found], [state]] = await Promise.all([locking, reading]);
      const row = visibleHold(found, args.accountId, args.holdId, args.programId);
      // An expiry that committed first wins: its release is not joined (it is past expires_at).
      refuseInactive(row, state!.past_expiry, "released");
      // A requested release already in flight is joined: its completion answers this key too.
      if (row.status === "releasing") return { operation: operations.release(row.id), value: row };
      if (state!.capturing) throw ruleViolation("hold_not_active", `a capture of hold ${row.id} is in progress; retry the release shortly`);
      const [updated] = await tx<HoldRow[]>`
        update holds set status = 'releasing', release_reason = 'requested', updated_at = now() where id = ${row.id} returning *`;
      return { operation: operations.release(row.id), value: updated! };
    },
  });
}
