import { create, type DescMessage, type MessageInitShape, type MessageShape } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import {
  answerIdempotencyKeys,
  forgetIdempotencyKeys,
  invalidArgument,
  isId,
  newId,
  decodeBinary,
  encodeBinary,
  NO_TRACE,
  notFound,
  outboxRowValues,
  ruleViolation,
  startIdempotentOperation,
  type CallOrigin,
  type KeyClaim,
  type Logger,
  type Outbox,
  type Sql,
  type Tx,
} from "@ledger/common";
import { EventSchema, type Event } from "@ledger/proto/events/v1/events_pb.js";
import type { Reservation } from "@ledger/proto/ledger/v1/reservation_pb.js";
import {
  CaptureHoldResponseSchema,
  CreateHoldResponseSchema,
  HoldReleaseReason,
  HoldStatus,
  ReleaseHoldResponseSchema,
  type HoldSchema,
} from "@ledger/proto/hold/v1/hold_pb.js";
import type { CrashPoint } from "./crash.js";
import type { GroupCommit } from "./group-commit.js";
import type { LedgerBatch } from "./ledger-batch.js";

/** A hold as stored. `creating` and `releasing` are the in-flight states recovery finishes. */
export interface HoldRow {
  id: string;
  account_id: string;
  program_id: string;
  entity_id: string;
  amount: bigint;
  captured_amount: bigint;
  status: "creating" | "held" | "partially_captured" | "captured" | "releasing" | "released";
  release_reason: string | null;
  currency_code: string;
  expires_at: Date | null;
  description: string;
  created_at: Date;
  updated_at: Date;
}

/** A capture as stored: pending until the ledger's transfer is recorded here. */
export interface CaptureRow {
  id: string;
  hold_id: string;
  amount: bigint;
  destination_entity_id: string;
  description: string;
  status: "pending" | "done";
  transaction_group_id: string | null;
  created_at: Date;
}

/** The statuses a client sees, as stored and as the API's enum. */
export const HOLD_STATUS_OF: Record<string, HoldStatus> = {
  held: HoldStatus.HELD,
  partially_captured: HoldStatus.PARTIALLY_CAPTURED,
  captured: HoldStatus.CAPTURED,
  released: HoldStatus.RELEASED,
};

/** The status a client sees: a release in flight still shows what the hold was. */
export function visibleStatus(row: HoldRow): string {
  if (row.status === "releasing") return row.captured_amount > 0n ? "partially_captured" : "held";
  return row.status;
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

const RELEASE_REASON_OF: Record<string, HoldReleaseReason> = {
  requested: HoldReleaseReason.REQUESTED,
  expired: HoldReleaseReason.EXPIRED,
};

/**
 * What a client sees of a hold, in the API and in the `hold.*` events alike, with `more` fields
 * added (assigned, not spread: V8 makes a new hidden class for each property after a spread, on
 * every call; bench/README.md, "Hidden classes per call"). The release reason goes in twice, as
 * the enum and as the word the previous version reads (docs/operations.md#upgrade-notes).
 */
function holdFields<T extends object>(row: HoldRow, more: T) {
  const releaseReason = row.status === "released" ? (row.release_reason ?? "") : "";
  // An undefined field is an unset one to protobuf-es's `create`, which every caller goes through.
  return Object.assign(
    {
      holdId: row.id,
      entityId: row.entity_id,
      programId: row.program_id,
      amount: row.amount,
      capturedAmount: row.captured_amount,
      description: row.description,
      releaseReason,
      holdReleaseReason: RELEASE_REASON_OF[releaseReason] ?? HoldReleaseReason.UNSPECIFIED,
      currencyCode: row.currency_code,
      createdAt: timestampFromDate(row.created_at),
      expiresAt: row.expires_at ? timestampFromDate(row.expires_at) : undefined,
    },
    more,
  );
}

function holdStatus(row: HoldRow): HoldStatus {
  return HOLD_STATUS_OF[visibleStatus(row)] ?? HoldStatus.UNSPECIFIED;
}

/** The API form of a hold. */
export function holdToProto(row: HoldRow): MessageInitShape<typeof HoldSchema> {
  return holdFields(row, { status: holdStatus(row), updatedAt: timestampFromDate(row.updated_at) });
}

/** What a capture answers: the hold after it and the transfer it made. */
function captureResponse(hold: HoldRow, capture: CaptureRow): MessageShape<typeof CaptureHoldResponseSchema> {
  return create(CaptureHoldResponseSchema, {
    hold: holdToProto(hold),
    amount: capture.amount,
    transactionGroupId: capture.transaction_group_id ?? "",
  });
}

function holdEvent(
  type: "hold.created" | "hold.captured" | "hold.released",
  row: HoldRow,
  origin: CallOrigin,
  capture?: CaptureRow,
): Event {
  const captured = capture
    ? {
        amount: capture.amount,
        destinationEntityId: capture.destination_entity_id,
        transactionGroupId: capture.transaction_group_id ?? "",
      }
    : undefined;
  return create(EventSchema, {
    id: newId("event"),
    type,
    accountId: row.account_id,
    programId: row.program_id,
    created: timestampFromDate(new Date()),
    requestId: origin.requestId,
    traceparent: origin.trace.traceparent,
    // The status twice too: the enum, and the word the previous version reads.
    data: { case: "hold", value: holdFields(row, { status: visibleStatus(row), holdStatus: holdStatus(row), captured }) },
  });
}

/** Whether an error is the ledger refusing the request, as opposed to failing to answer. */
function isRefusal(err: unknown): boolean {
  const code = ConnectError.from(err).code;
  return [Code.InvalidArgument, Code.NotFound, Code.FailedPrecondition, Code.AlreadyExists, Code.OutOfRange].includes(code);
}

/** What the hold flows need. */
export interface HoldDeps {
  sql: Sql;
  /** Where the hold operations' transactions run, many requests' steps to one transaction. */
  commits: GroupCommit;
  outbox: Outbox;
  /** The ledger's reservation commands, many holds' to one call (see ledger-batch.ts). */
  reservations: LedgerBatch;
  crash: (point: CrashPoint) => void;
  log: Logger;
}

/** Idempotency of one call: the key and a fingerprint of the request. */
export interface Idempotency {
  key: string;
  fingerprint: Buffer;
}

/** The answer to a client's call: the response, and whether it is the stored one of an earlier call with its key. */
export interface Answer<O extends DescMessage> {
  response: MessageShape<O>;
  replayed: boolean;
}

/**
 * The operation a client's idempotency key waits on: the intent its first request recorded. Each
 * completion (by the request or by recovery) answers the keys of its operation. These keys are the
 * client's, a layer above the hold's own ids that keep the calls to the ledger idempotent.
 */
const operations = {
  create: (holdId: string) => `create:${holdId}`,
  capture: (captureId: string) => `capture:${captureId}`,
  release: (holdId: string) => `release:${holdId}`,
};

function keyClaim(accountId: string, idempotency: Idempotency | undefined): KeyClaim | undefined {
  return idempotency && { accountId, ...idempotency };
}

/**
 * The hold lifecycle. Each operation is three steps: record the intent here, call the ledger
 * (idempotent by hold id or capture id), record the result here with its event. A crash between
 * steps leaves an intent that `recover` finishes by repeating the same ledger call.
 */
export function createHolds(deps: HoldDeps) {
  const { sql, commits, outbox, reservations, crash, log } = deps;
  /**
   * What a step touches, for group commit: steps on one hold, or with one client key, never share a
   * transaction (see group-commit.ts).
   */
  const touching = (holdId: string, idempotency?: KeyClaim) =>
    idempotency ? [holdId, `key:${idempotency.accountId}\u0000${idempotency.key}`] : [holdId];
  /** `startIdempotentOperation`'s transaction, in a group-committed one. */
  const sharedTransaction =
    (keys: string[]) =>
    <R>(work: (tx: Tx, writes: Promise<unknown>[]) => Promise<R>) =>
      commits.transaction(keys, work);
  // Expiry and recovery act for no client call: a request id of their own for the logs, no trace.
  const background = (requestId: string): CallOrigin => ({ requestId, trace: NO_TRACE });

  /** The hold, when the caller may see it: another account's, another program's or an unfinished one is not found. */
  function visibleHold(row: HoldRow | undefined, accountId: string, holdId: string, programId: string): HoldRow {
    if (!row || row.account_id !== accountId || row.status === "creating" || (programId !== "" && row.program_id !== programId)) {
      throw notFound("hold", holdId);
    }
    return row;
  }

  /**
   * Reserves in the ledger and completes a hold in `creating`. Safe to repeat. `keyed` false says
   * no client key waits on this creation (the request sent none, and no other request can join an
   * operation named by a hold id it never saw), so no key's answer is written.
   */
  async function finishCreate(hold: HoldRow, origin: CallOrigin, keyed = true): Promise<MessageShape<typeof CreateHoldResponseSchema>> {
    let reservation: Reservation;
    try {
      const res = await reservations.reserve(
        hold.account_id,
        { programId: hold.program_id, reservationId: hold.id, entityId: hold.entity_id, amount: hold.amount },
        origin,
      );
      reservation = res.reservation!;
    } catch (err) {
      if (isRefusal(err)) {
        // Nothing was reserved: the intent goes with its keys, and a retry with the same key is tried afresh.
        await commits.transaction([hold.id], async (tx, writes) => {
          writes.push(
            tx`delete from holds where id = ${hold.id} and status = 'creating'`.execute(),
            forgetIdempotencyKeys(tx, operations.create(hold.id)),
          );
        });
      }
      throw err;
    }
    crash("after_ledger_reserve");
    // The completed hold is known before it is written, so the change, its event and the response
    // for the client's key are all sent at once with the COMMIT: one round trip.
    const held: HoldRow = Object.assign({}, hold, {
      status: "held",
      program_id: reservation.programId,
      currency_code: reservation.currencyCode,
      updated_at: new Date(),
    });
    const response = create(CreateHoldResponseSchema, { hold: holdToProto(held) });
    const event = outbox.writeOf([holdEvent("hold.created", held, origin)]);
    let completing: Promise<{ n: number }[]> | undefined;
    await commits.transaction([hold.id], async (tx, writes) => {
      completing = tx<{ n: number }[]>`
        with done as (
          update holds set status = 'held', program_id = ${held.program_id}, currency_code = ${held.currency_code}, updated_at = ${held.updated_at}
          where id = ${hold.id} and status = 'creating' returning id),
        events as (
          insert into outbox_writes (events, event_ids, subjects, payloads)
          select ${outboxRowValues(tx, event)} from done)
        select count(*)::int as n from done`.execute();
      writes.push(completing);
      // A key another completion answered first keeps that answer (`response is null` in the update).
      if (keyed) writes.push(answerIdempotencyKeys(tx, operations.create(hold.id), encodeBinary(CreateHoldResponseSchema, response)));
    });
    const [written] = await completing!;
    if (written!.n === 0) {
      // Another process (recovery) completed it first: answer with what it wrote.
      const [row] = await sql<HoldRow[]>`select * from holds where id = ${hold.id}`;
      return create(CreateHoldResponseSchema, { hold: holdToProto(row!) });
    }
    outbox.wake();
    return response;
  }

  /** Captures in the ledger and completes a pending capture. Safe to repeat. `keyed` as for `finishCreate`. */
  async function finishCapture(
    hold: HoldRow,
    capture: CaptureRow,
    origin: CallOrigin,
    keyed = true,
  ): Promise<MessageShape<typeof CaptureHoldResponseSchema>> {
    let groupId: string;
    try {
      const res = await reservations.capture(
        hold.account_id,
        {
          programId: hold.program_id,
          reservationId: hold.id,
          captureId: capture.id,
          amount: capture.amount,
          destinationEntityId: capture.destination_entity_id,
          description: capture.description,
        },
        origin,
      );
      groupId = res.transactionGroup!.transactionGroupId;
    } catch (err) {
      if (isRefusal(err)) {
        await commits.transaction([hold.id], async (tx, writes) => {
          writes.push(
            tx`delete from captures where id = ${capture.id} and status = 'pending'`.execute(),
            forgetIdempotencyKeys(tx, operations.capture(capture.id)),
          );
        });
      }
      throw err;
    }
    crash("after_ledger_capture");
    const done: CaptureRow = Object.assign({}, capture, { status: "done" as const, transaction_group_id: groupId });
    const completed = (await completeCaptureAsSeen(hold, done, origin, keyed)) ?? (await completeCaptureAfresh(hold, done, origin, keyed));
    if (completed.completed) outbox.wake();
    return completed.response;
  }

  /**
   * The common case in one round trip: the hold is as the capture's intent saw it (no other capture
   * of it completed since), so the hold after this capture, its event and the response for the
   * client's key are known before anything is written, and one conditional statement writes them
   * all with the COMMIT. The statement locks the hold first and checks its captured amount and
   * status on the newest version of the row; when they moved, it writes nothing and the caller
   * falls back to `completeCaptureAfresh`. Undefined then.
   */
  async function completeCaptureAsSeen(
    hold: HoldRow,
    done: CaptureRow,
    origin: CallOrigin,
    keyed: boolean,
  ): Promise<{ response: MessageShape<typeof CaptureHoldResponseSchema>; completed: boolean } | undefined> {
    const capturedAmount = hold.captured_amount + done.amount;
    const after: HoldRow = Object.assign({}, hold, {
      captured_amount: capturedAmount,
      status: capturedAmount === hold.amount ? "captured" : "partially_captured",
      updated_at: new Date(),
    });
    const response = captureResponse(after, done);
    const event = outbox.writeOf([holdEvent("hold.captured", after, origin, done)]);
    let completing: Promise<{ n: number }[]> | undefined;
    await commits.transaction([hold.id], async (tx, writes) => {
      // The hold is locked before the capture, as the intent and the fallback do, so two completions
      // of one hold queue on the hold's lock. A capture already done (recovery finished it) has moved
      // the captured amount, so it is not done twice.
      completing = tx<{ n: number }[]>`
        with seen as (
          select id from holds where id = ${hold.id} and captured_amount = ${hold.captured_amount} and status = ${hold.status}
          for update),
        done as (
          update captures set status = 'done', transaction_group_id = ${done.transaction_group_id}
          where id = ${done.id} and status = 'pending' and exists (select 1 from seen) returning id),
        held as (
          update holds set captured_amount = ${after.captured_amount}, status = ${after.status}, updated_at = ${after.updated_at}
          where id = ${hold.id} and exists (select 1 from done) returning id),
        events as (
          insert into outbox_writes (events, event_ids, subjects, payloads)
          select ${outboxRowValues(tx, event)} from held)
        ${
          keyed
            ? tx`, keys as (
          update idempotency_keys set response = ${encodeBinary(CaptureHoldResponseSchema, response)}
          where operation = ${operations.capture(done.id)} and response is null and exists (select 1 from held))`
            : tx``
        }
        select count(*)::int as n from held`.execute();
      writes.push(completing);
    });
    const [written] = await completing!;
    return written!.n === 0 ? undefined : { response, completed: true };
  }

  /**
   * A capture's completion reading the hold as it is: when another capture of the hold completed
   * since this one's intent, or another process completed this one.
   */
  async function completeCaptureAfresh(
    hold: HoldRow,
    done: CaptureRow,
    origin: CallOrigin,
    keyed: boolean,
  ): Promise<{ response: MessageShape<typeof CaptureHoldResponseSchema>; completed: boolean }> {
    // One statement marks the capture done and adds it to the hold; the event and the response for
    // the client's key, built from the hold as that statement left it, go out with the COMMIT.
    return commits.transaction([hold.id], async (tx, writes) => {
      const [row] = await tx<HoldRow[]>`
        with seen as (select id from holds where id = ${hold.id} for update),
        done as (
          update captures set status = 'done', transaction_group_id = ${done.transaction_group_id}
          where id = ${done.id} and status = 'pending' and exists (select 1 from seen) returning hold_id, amount)
        update holds h set captured_amount = h.captured_amount + done.amount,
          status = case when h.captured_amount + done.amount = h.amount then 'captured' else 'partially_captured' end,
          updated_at = now()
        from done where h.id = done.hold_id returning h.*`;
      if (!row) {
        // Another process (recovery) completed it first: answer with what it wrote.
        const [again] = await tx<CaptureRow[]>`select * from captures where id = ${done.id}`;
        const [now] = await tx<HoldRow[]>`select * from holds where id = ${hold.id}`;
        return { response: captureResponse(now!, again!), completed: false };
      }
      const response = captureResponse(row, done);
      writes.push(outbox.enqueue(tx, [holdEvent("hold.captured", row, origin, done)]));
      if (keyed) writes.push(answerIdempotencyKeys(tx, operations.capture(done.id), encodeBinary(CaptureHoldResponseSchema, response)));
      return { response, completed: true };
    });
  }

  /** Releases in the ledger and completes a hold in `releasing`. Safe to repeat. */
  async function finishRelease(hold: HoldRow, origin: CallOrigin): Promise<MessageShape<typeof ReleaseHoldResponseSchema>> {
    await reservations.release(hold.account_id, { programId: hold.program_id, reservationId: hold.id }, origin);
    crash("after_ledger_release");
    const response = await commits.transaction([hold.id], async (tx, writes) => {
      const [row] = await tx<HoldRow[]>`
        update holds set status = 'released', updated_at = now() where id = ${hold.id} and status = 'releasing' returning *`;
      if (!row)
        return create(ReleaseHoldResponseSchema, {
          hold: holdToProto((await tx<HoldRow[]>`select * from holds where id = ${hold.id}`)[0]!),
        });
      const released = create(ReleaseHoldResponseSchema, { hold: holdToProto(row) });
      // Several keys may wait on one release (a request joined one in flight): this answers them all.
      writes.push(
        outbox.enqueue(tx, [holdEvent("hold.released", row, origin)]),
        answerIdempotencyKeys(tx, operations.release(hold.id), encodeBinary(ReleaseHoldResponseSchema, released)),
      );
      return released;
    });
    outbox.wake();
    return response;
  }

  return {
    async create(args: {
      accountId: string;
      programId: string;
      entityId: string;
      amount: bigint;
      expiresAt?: Date;
      description: string;
      idempotency?: Idempotency;
      origin: CallOrigin;
    }): Promise<Answer<typeof CreateHoldResponseSchema>> {
      const id = newId("hold");
      const claim = keyClaim(args.accountId, args.idempotency);
      const started = await startIdempotentOperation({
        sql,
        transaction: sharedTransaction(touching(id, claim)),
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
      if (started.kind === "replay") return { response: decodeBinary(CreateHoldResponseSchema, started.response), replayed: true };
      const [hold] = await started.value;
      crash("after_create_intent");
      return { response: await finishCreate(hold!, args.origin, claim !== undefined), replayed: false };
    },

    async capture(args: {
      accountId: string;
      programId: string;
      holdId: string;
      amount: bigint;
      destinationEntityId: string;
      description: string;
      idempotency?: Idempotency;
      origin: CallOrigin;
    }): Promise<Answer<typeof CaptureHoldResponseSchema>> {
      if (!isId("hold", args.holdId)) throw notFound("hold", args.holdId);
      const claim = keyClaim(args.accountId, args.idempotency);
      const started = await startIdempotentOperation({
        sql,
        transaction: sharedTransaction(touching(args.holdId, claim)),
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
          if (hold.status === "releasing") {
            throw ruleViolation(
              "hold_not_active",
              `hold ${hold.id} is ${visibleStatus(hold)} and being released; only held or partially captured holds can be captured`,
              { status: visibleStatus(hold) },
            );
          }
          const remaining = hold.amount - hold.captured_amount - pending!.total;
          if (args.amount > remaining) {
            throw ruleViolation(
              "capture_exceeds_hold",
              `the capture of ${args.amount} exceeds the ${remaining} remaining on hold ${hold.id}`,
              {
                remaining: Number(remaining),
                requested: Number(args.amount),
              },
            );
          }
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
      if (started.kind === "replay") return { response: decodeBinary(CaptureHoldResponseSchema, started.response), replayed: true };
      crash("after_capture_intent");
      return {
        response: await finishCapture(started.value.hold, started.value.capture, args.origin, claim !== undefined),
        replayed: false,
      };
    },

    async release(args: {
      accountId: string;
      programId: string;
      holdId: string;
      idempotency?: Idempotency;
      origin: CallOrigin;
    }): Promise<Answer<typeof ReleaseHoldResponseSchema>> {
      const claim = keyClaim(args.accountId, args.idempotency);
      const started = await startIdempotentOperation({
        sql,
        transaction: sharedTransaction(touching(args.holdId, claim)),
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
          if (state!.capturing)
            throw ruleViolation("hold_not_active", `a capture of hold ${row.id} is in progress; retry the release shortly`);
          const [updated] = await tx<HoldRow[]>`
            update holds set status = 'releasing', release_reason = 'requested', updated_at = now() where id = ${row.id} returning *`;
          return { operation: operations.release(row.id), value: updated! };
        },
      });
      if (started.kind === "replay") return { response: decodeBinary(ReleaseHoldResponseSchema, started.response), replayed: true };
      crash("after_release_intent");
      return { response: await finishRelease(started.value, args.origin), replayed: false };
    },

    async get(accountId: string, programId: string, holdId: string): Promise<HoldRow> {
      if (!isId("hold", holdId)) throw notFound("hold", holdId);
      const [row] = await sql<HoldRow[]>`select * from holds where id = ${holdId} and account_id = ${accountId}`;
      if (!row || row.status === "creating" || (programId !== "" && row.program_id !== programId)) throw notFound("hold", holdId);
      return row;
    },

    async list(entityId: string, page: { limit: number; before?: string | undefined; status?: string | undefined }): Promise<HoldRow[]> {
      const status = page.status ?? "";
      return sql<HoldRow[]>`
        select * from holds
        where entity_id = ${entityId} and status <> 'creating'
          and (${status} = '' or (case when status = 'releasing'
                                       then (case when captured_amount > 0 then 'partially_captured' else 'held' end)
                                       else status end) = ${status})
          ${page.before ? sql`and id < ${page.before}` : sql``}
        order by id desc limit ${page.limit + 1}`;
    },

    /** Releases every hold whose `expires_at` has passed. Several replicas never release one twice. */
    async expireDue(): Promise<number> {
      const due: HoldRow[] = await sql.begin(async (tx): Promise<HoldRow[]> => {
        const rows = await tx<HoldRow[]>`
          select * from holds h
          where status in ('held', 'partially_captured') and expires_at <= now()
            and not exists (select 1 from captures c where c.hold_id = h.id and c.status = 'pending')
          order by expires_at limit 100 for update skip locked`;
        if (rows.length === 0) return [];
        // Asked again now that the holds are locked: the select's snapshot is older than its locks,
        // and a capture's intent that committed in between (decided before expires_at) must
        // complete before the expiry releases the rest in the ledger.
        return tx<HoldRow[]>`
          update holds h set status = 'releasing', release_reason = 'expired', updated_at = now()
          where id in ${tx(rows.map((r) => r.id))}
            and not exists (select 1 from captures c where c.hold_id = h.id and c.status = 'pending')
          returning *`;
      });
      for (const hold of due) {
        await finishRelease(hold, background(`expiry-${hold.id}`)).catch((err: unknown) =>
          log.warn({ hold_id: hold.id, err: (err as Error).message }, "expiry release failed; recovery will finish it"),
        );
      }
      return due.length;
    },

    /**
     * Finishes operations a crashed process left half done: holds in `creating` or `releasing`
     * and pending captures older than `olderThanMs`. Every step is idempotent, so finishing work
     * that is in fact still running elsewhere is harmless.
     */
    async recover(olderThanMs: number): Promise<number> {
      let finished = 0;
      const stale = sql`now() - make_interval(secs => ${olderThanMs / 1000})`;
      for (const hold of await sql<HoldRow[]>`select * from holds where status = 'creating' and updated_at < ${stale} limit 100`) {
        await finishCreate(hold, background(`recovery-${hold.id}`)).then(
          () => finished++,
          (err: unknown) => log.warn({ hold_id: hold.id, err: (err as Error).message }, "could not finish a hold's creation"),
        );
      }
      for (const capture of await sql<CaptureRow[]>`select * from captures where status = 'pending' and created_at < ${stale} limit 100`) {
        const [hold] = await sql<HoldRow[]>`select * from holds where id = ${capture.hold_id}`;
        await finishCapture(hold!, capture, background(`recovery-${capture.id}`)).then(
          () => finished++,
          (err: unknown) => log.warn({ capture_id: capture.id, err: (err as Error).message }, "could not finish a capture"),
        );
      }
      for (const hold of await sql<HoldRow[]>`select * from holds where status = 'releasing' and updated_at < ${stale} limit 100`) {
        await finishRelease(hold, background(`recovery-${hold.id}`)).then(
          () => finished++,
          (err: unknown) => log.warn({ hold_id: hold.id, err: (err as Error).message }, "could not finish a release"),
        );
      }
      if (finished > 0) log.info({ finished }, "recovered unfinished hold operations");
      return finished;
    },
  };
}

/** Validates an expiry time: ISO 8601 in the future, at most a year ahead. */
export function parseExpiry(date: Date | undefined): Date | undefined {
  if (!date) return undefined;
  if (date.getTime() <= Date.now()) throw invalidArgument("expires_at must be in the future");
  if (date.getTime() > Date.now() + 366 * 24 * 3600 * 1000) throw invalidArgument("expires_at must be within a year");
  return date;
}
