// Steps two and three of each hold operation: the ledger's call, idempotent by hold id or capture
// id, then the completion here with its event and the answer for the client's keys. Each is safe
// to repeat, which is how recovery (hold-recovery.ts) finishes an intent a crash left.
import { create, toBinary, type MessageShape } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import {
  answerIdempotencyKeys,
  forgetIdempotencyKeys,
  outboxRowValues,
  type CallOrigin,
  type Logger,
  type Outbox,
  type Sql,
} from "@ledger/common";
import type { Reservation } from "@ledger/proto/ledger/v1/reservation_pb.js";
import { CaptureHoldResponseSchema, CreateHoldResponseSchema, ReleaseHoldResponseSchema } from "@ledger/proto/hold/v1/hold_pb.js";
import type { CrashPoint } from "./crash.js";
import type { GroupCommit } from "./group-commit.js";
import { captureResponse, holdEvent, holdToProto, operations, type CaptureRow, type HoldRow } from "./hold-rows.js";
import type { LedgerBatch } from "./ledger-batch.js";

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

/** Whether an error is the ledger refusing the request, as opposed to failing to answer. */
function isRefusal(err: unknown): boolean {
  const code = ConnectError.from(err).code;
  return [Code.InvalidArgument, Code.NotFound, Code.FailedPrecondition, Code.AlreadyExists, Code.OutOfRange].includes(code);
}

/**
 * Reserves in the ledger and completes a hold in `creating`. Safe to repeat. `keyed` false says
 * no client key waits on this creation (the request sent none, and no other request can join an
 * operation named by a hold id it never saw), so no key's answer is written.
 */
export async function finishCreate(
  deps: HoldDeps,
  hold: HoldRow,
  origin: CallOrigin,
  keyed = true,
): Promise<MessageShape<typeof CreateHoldResponseSchema>> {
  const { sql, commits, outbox, reservations, crash } = deps;
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
    if (keyed) writes.push(answerIdempotencyKeys(tx, operations.create(hold.id), toBinary(CreateHoldResponseSchema, response)));
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
export async function finishCapture(
  deps: HoldDeps,
  hold: HoldRow,
  capture: CaptureRow,
  origin: CallOrigin,
  keyed = true,
): Promise<MessageShape<typeof CaptureHoldResponseSchema>> {
  const { commits, outbox, reservations, crash } = deps;
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
  const completed =
    (await completeCaptureAsSeen(deps, hold, done, origin, keyed)) ?? (await completeCaptureAfresh(deps, hold, done, origin, keyed));
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
  { commits, outbox }: HoldDeps,
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
        update idempotency_keys set response = ${toBinary(CaptureHoldResponseSchema, response)}
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
  { commits, outbox }: HoldDeps,
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
    if (keyed) writes.push(answerIdempotencyKeys(tx, operations.capture(done.id), toBinary(CaptureHoldResponseSchema, response)));
    return { response, completed: true };
  });
}

/** Releases in the ledger and completes a hold in `releasing`. Safe to repeat. */
export async function finishRelease(
  deps: HoldDeps,
  hold: HoldRow,
  origin: CallOrigin,
): Promise<MessageShape<typeof ReleaseHoldResponseSchema>> {
  const { commits, outbox, reservations, crash } = deps;
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
      answerIdempotencyKeys(tx, operations.release(hold.id), toBinary(ReleaseHoldResponseSchema, released)),
    );
    return released;
  });
  outbox.wake();
  return response;
}
