import { create, toBinary, type MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import { invalidArgument, isId, newId, NO_TRACE, notFound, pipelinedTransaction, ruleViolation, type CallOrigin, type Logger, type Outbox, type Sql, type Tx } from "@ledger/common";
import { EventSchema, type Event } from "@ledger/proto/events/v1/events_pb.js";
import { CreateHoldResponseSchema, type HoldSchema } from "@ledger/proto/hold/v1/hold_pb.js";
import type { CrashPoint } from "./crash.js";
import type { LedgerClients } from "./ledger-client.js";

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
  idempotency_key: string | null;
  fingerprint: Buffer | null;
  create_response: Uint8Array | null;
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
  idempotency_key: string | null;
  fingerprint: Buffer | null;
  response: Uint8Array | null;
  created_at: Date;
}

/** The status a client sees: a release in flight still shows what the hold was. */
export function visibleStatus(row: HoldRow): string {
  if (row.status === "releasing") return row.captured_amount > 0n ? "partially_captured" : "held";
  return row.status;
}

/** What a client sees of a hold, in the API and in the `hold.*` events alike. */
function holdFields(row: HoldRow) {
  return {
    holdId: row.id,
    entityId: row.entity_id,
    programId: row.program_id,
    amount: row.amount,
    capturedAmount: row.captured_amount,
    status: visibleStatus(row),
    ...(row.expires_at ? { expiresAt: timestampFromDate(row.expires_at) } : {}),
    description: row.description,
    releaseReason: row.status === "released" ? (row.release_reason ?? "") : "",
    currencyCode: row.currency_code,
    createdAt: timestampFromDate(row.created_at),
  };
}

/** The API form of a hold. */
export function holdToProto(row: HoldRow): MessageInitShape<typeof HoldSchema> {
  return { ...holdFields(row), updatedAt: timestampFromDate(row.updated_at) };
}

function holdEvent(type: "hold.created" | "hold.captured" | "hold.released", row: HoldRow, origin: CallOrigin, capture?: CaptureRow): Event {
  const captured = capture
    ? { captured: { amount: capture.amount, destinationEntityId: capture.destination_entity_id, transactionGroupId: capture.transaction_group_id ?? "" } }
    : {};
  return create(EventSchema, {
    id: newId("event"),
    type,
    accountId: row.account_id,
    programId: row.program_id,
    created: timestampFromDate(new Date()),
    requestId: origin.requestId,
    traceparent: origin.trace.traceparent,
    data: { case: "hold", value: { ...holdFields(row), ...captured } },
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
  outbox: Outbox;
  ledger: LedgerClients;
  crash: (point: CrashPoint) => void;
  log: Logger;
}

/** Idempotency of one call: the key and a fingerprint of the request. */
export interface Idempotency {
  key: string;
  fingerprint: Buffer;
}

/**
 * The hold lifecycle. Each operation is three steps: record the intent here, call the ledger
 * (idempotent by hold id or capture id), record the result here with its event. A crash between
 * steps leaves an intent that `recover` finishes by repeating the same ledger call.
 */
export function createHolds(deps: HoldDeps) {
  const { sql, outbox, ledger, crash, log } = deps;
  // Expiry and recovery act for no client call: a request id of their own for the logs, no trace.
  const background = (requestId: string): CallOrigin => ({ requestId, trace: NO_TRACE });

  /** The hold, when the caller may see it: another account's, another program's or an unfinished one is not found. */
  function visibleHold(row: HoldRow | undefined, accountId: string, holdId: string, programId: string): HoldRow {
    if (!row || row.account_id !== accountId || row.status === "creating" || (programId !== "" && row.program_id !== programId)) {
      throw notFound("hold", holdId);
    }
    return row;
  }

  async function lockHold(tx: Tx, accountId: string, holdId: string, programId: string): Promise<HoldRow> {
    if (!isId("hold", holdId)) throw notFound("hold", holdId);
    const [row] = await tx<HoldRow[]>`select * from holds where id = ${holdId} for update`;
    return visibleHold(row, accountId, holdId, programId);
  }

  /** Reserves in the ledger and completes a hold in `creating`. Safe to repeat. */
  async function finishCreate(hold: HoldRow, origin: CallOrigin): Promise<HoldRow> {
    let reservation;
    try {
      const res = await ledger.reservations.reserve(
        { programId: hold.program_id, reservationId: hold.id, entityId: hold.entity_id, amount: hold.amount },
        ledger.asAccount(hold.account_id, origin),
      );
      reservation = res.reservation!;
    } catch (err) {
      if (isRefusal(err)) {
        // Nothing was reserved: the intent goes, and a retry with the same key is tried afresh.
        await sql`delete from holds where id = ${hold.id} and status = 'creating'`;
      }
      throw err;
    }
    crash("after_ledger_reserve");
    // The completed hold is known before it is written, so its stored response and its event go in
    // the same single statement as the change: one round trip, atomic without a transaction block.
    const held: HoldRow = { ...hold, status: "held", program_id: reservation.programId, currency_code: reservation.currencyCode, updated_at: new Date() };
    const response = toBinary(CreateHoldResponseSchema, create(CreateHoldResponseSchema, { hold: holdToProto(held) }));
    const [event] = outbox.rowsOf([holdEvent("hold.created", held, origin)]);
    const [written] = await sql<{ n: number }[]>`
      with done as (
        update holds set status = 'held', program_id = ${held.program_id}, currency_code = ${held.currency_code},
          updated_at = ${held.updated_at}, create_response = ${Buffer.from(response)}
        where id = ${hold.id} and status = 'creating' returning id),
      events as (
        insert into outbox (event_id, subject, payload)
        select ${event!.event_id}, ${event!.subject}, ${Buffer.from(event!.payload)} from done)
      select count(*)::int as n from done`;
    // Another process (recovery) completed it first: answer with what it wrote.
    if (written!.n === 0) return (await sql<HoldRow[]>`select * from holds where id = ${hold.id}`)[0]!;
    outbox.wake();
    return held;
  }

  /** Captures in the ledger and completes a pending capture. Safe to repeat. */
  async function finishCapture(hold: HoldRow, capture: CaptureRow, origin: CallOrigin): Promise<{ hold: HoldRow; capture: CaptureRow }> {
    let groupId: string;
    try {
      const res = await ledger.reservations.captureReservation(
        {
          programId: hold.program_id,
          reservationId: hold.id,
          captureId: capture.id,
          amount: capture.amount,
          destinationEntityId: capture.destination_entity_id,
          description: capture.description,
        },
        ledger.asAccount(hold.account_id, origin),
      );
      groupId = res.transactionGroup!.transactionGroupId;
    } catch (err) {
      if (isRefusal(err)) await sql`delete from captures where id = ${capture.id} and status = 'pending'`;
      throw err;
    }
    crash("after_ledger_capture");
    // One statement marks the capture done and adds it to the hold; the event, built from the hold
    // as that statement left it, goes out with the COMMIT.
    const result = await pipelinedTransaction(sql, async (tx, writes) => {
      const [row] = await tx<HoldRow[]>`
        with done as (
          update captures set status = 'done', transaction_group_id = ${groupId}
          where id = ${capture.id} and status = 'pending' returning hold_id, amount)
        update holds h set captured_amount = h.captured_amount + done.amount,
          status = case when h.captured_amount + done.amount = h.amount then 'captured' else 'partially_captured' end,
          updated_at = now()
        from done where h.id = done.hold_id returning h.*`;
      if (!row) {
        // Another process (recovery) completed it first: answer with what it wrote.
        const [again] = await tx<CaptureRow[]>`select * from captures where id = ${capture.id}`;
        return { hold: (await tx<HoldRow[]>`select * from holds where id = ${hold.id}`)[0]!, capture: again!, completed: false };
      }
      const done: CaptureRow = { ...capture, status: "done", transaction_group_id: groupId };
      writes.push(outbox.enqueue(tx, [holdEvent("hold.captured", row, origin, done)]));
      return { hold: row, capture: done, completed: true };
    });
    if (result.completed) outbox.wake();
    return { hold: result.hold, capture: result.capture };
  }

  /** Releases in the ledger and completes a hold in `releasing`. Safe to repeat. */
  async function finishRelease(hold: HoldRow, origin: CallOrigin): Promise<HoldRow> {
    await ledger.reservations.releaseReservation({ programId: hold.program_id, reservationId: hold.id }, ledger.asAccount(hold.account_id, origin));
    crash("after_ledger_release");
    const done = await sql.begin(async (tx) => {
      const [row] = await tx<HoldRow[]>`
        update holds set status = 'released', updated_at = now() where id = ${hold.id} and status = 'releasing' returning *`;
      if (!row) return (await tx<HoldRow[]>`select * from holds where id = ${hold.id}`)[0]!;
      await outbox.enqueue(tx, [holdEvent("hold.released", row, origin)]);
      return row;
    });
    outbox.wake();
    return done;
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
    }): Promise<{ hold: HoldRow; replay?: Uint8Array }> {
      const id = newId("hold");
      const key = args.idempotency;
      const inserted = await sql<HoldRow[]>`
        insert into holds (id, account_id, program_id, entity_id, amount, status, expires_at, description, idempotency_key, fingerprint)
        values (${id}, ${args.accountId}, ${args.programId}, ${args.entityId}, ${args.amount}, 'creating', ${args.expiresAt ?? null},
                ${args.description}, ${key?.key ?? null}, ${key?.fingerprint ?? null})
        on conflict (account_id, idempotency_key) where idempotency_key is not null do nothing
        returning *`;
      let hold = inserted[0];
      if (!hold) {
        const [existing] = await sql<HoldRow[]>`select * from holds where account_id = ${args.accountId} and idempotency_key = ${key!.key}`;
        if (!existing) throw new ConnectError("idempotency key vanished; retry", Code.Aborted);
        if (!Buffer.from(existing.fingerprint!).equals(key!.fingerprint)) {
          throw ruleViolation("idempotency_conflict", "this Idempotency-Key was already used with a different request");
        }
        if (existing.status !== "creating" && existing.create_response) return { hold: existing, replay: existing.create_response };
        hold = existing;
      }
      crash("after_create_intent");
      return { hold: await finishCreate(hold, args.origin) };
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
    }): Promise<{ hold: HoldRow; capture: CaptureRow; replay?: Uint8Array }> {
      const key = args.idempotency;
      if (!isId("hold", args.holdId)) throw notFound("hold", args.holdId);
      const intent = await pipelinedTransaction(sql, async (tx, writes) => {
        // Sent together: the captures are read after the hold's lock is granted, each statement
        // with a snapshot of its own, so a capture committed while this waited for the lock counts.
        const locking = tx<HoldRow[]>`select * from holds where id = ${args.holdId} for update`.execute();
        const reading = tx<{ total: bigint; n: bigint }[]>`
          select coalesce(sum(amount) filter (where status = 'pending'), 0)::int8 as total, count(*)::int8 as n
          from captures where hold_id = ${args.holdId}`.execute();
        const repeating = key
          ? tx<CaptureRow[]>`select * from captures where hold_id = ${args.holdId} and idempotency_key = ${key.key}`.execute()
          : Promise.resolve([]);
        const [[row], [pending], [earlier]] = await Promise.all([locking, reading, repeating]);
        const hold = visibleHold(row, args.accountId, args.holdId, args.programId);
        if (key) {
          if (earlier) {
            if (!Buffer.from(earlier.fingerprint!).equals(key.fingerprint)) {
              throw ruleViolation("idempotency_conflict", "this Idempotency-Key was already used with a different request");
            }
            return { hold, capture: earlier };
          }
        }
        if (hold.status !== "held" && hold.status !== "partially_captured") {
          throw ruleViolation("hold_not_active", `hold ${hold.id} is ${visibleStatus(hold)}${hold.status === "releasing" ? " and being released" : ""}; only held or partially captured holds can be captured`, {
            status: visibleStatus(hold),
          });
        }
        const remaining = hold.amount - hold.captured_amount - pending!.total;
        if (args.amount > remaining) {
          throw ruleViolation("capture_exceeds_hold", `the capture of ${args.amount} exceeds the ${remaining} remaining on hold ${hold.id}`, {
            remaining: Number(remaining),
            requested: Number(args.amount),
          });
        }
        const capture: CaptureRow = {
          id: `${hold.id}:${pending!.n + 1n}`,
          hold_id: hold.id,
          amount: args.amount,
          destination_entity_id: args.destinationEntityId,
          description: args.description || `Capture of ${hold.id}`,
          status: "pending",
          transaction_group_id: null,
          idempotency_key: key?.key ?? null,
          fingerprint: key?.fingerprint ?? null,
          response: null,
          // The database's clock stamps the row (recovery compares it with now()); this is for the caller only.
          created_at: new Date(),
        };
        writes.push(tx`
          insert into captures (id, hold_id, amount, destination_entity_id, description, status, idempotency_key, fingerprint)
          values (${capture.id}, ${capture.hold_id}, ${capture.amount}, ${capture.destination_entity_id}, ${capture.description},
                  'pending', ${capture.idempotency_key}, ${capture.fingerprint})`.execute());
        return { hold, capture };
      });
      if (intent.capture.status === "done" && intent.capture.response) return { ...intent, replay: intent.capture.response };
      crash("after_capture_intent");
      return finishCapture(intent.hold, intent.capture, args.origin);
    },

    /** Stores the response of a keyed capture so a retry replays it. */
    async rememberCaptureResponse(captureId: string, response: Uint8Array): Promise<void> {
      await sql`update captures set response = ${response} where id = ${captureId} and idempotency_key is not null`;
    },

    async release(args: { accountId: string; programId: string; holdId: string; reason: "requested" | "expired"; origin: CallOrigin }): Promise<HoldRow> {
      const hold = await sql.begin(async (tx) => {
        const row = await lockHold(tx, args.accountId, args.holdId, args.programId);
        if (row.status === "releasing") return row;
        if (row.status !== "held" && row.status !== "partially_captured") {
          throw ruleViolation("hold_not_active", `hold ${row.id} is ${row.status}; only held or partially captured holds can be released`, { status: row.status });
        }
        const [pending] = await tx`select 1 from captures where hold_id = ${row.id} and status = 'pending' limit 1`;
        if (pending) throw ruleViolation("hold_not_active", `a capture of hold ${row.id} is in progress; retry the release shortly`);
        const [updated] = await tx<HoldRow[]>`
          update holds set status = 'releasing', release_reason = ${args.reason}, updated_at = now() where id = ${row.id} returning *`;
        return updated!;
      });
      crash("after_release_intent");
      return finishRelease(hold, args.origin);
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
        return tx<HoldRow[]>`
          update holds set status = 'releasing', release_reason = 'expired', updated_at = now()
          where id in ${tx(rows.map((r) => r.id))} returning *`;
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
        await finishCreate(hold, background(`recovery-${hold.id}`)).then(() => finished++, (err: unknown) => log.warn({ hold_id: hold.id, err: (err as Error).message }, "could not finish a hold's creation"));
      }
      for (const capture of await sql<CaptureRow[]>`select * from captures where status = 'pending' and created_at < ${stale} limit 100`) {
        const [hold] = await sql<HoldRow[]>`select * from holds where id = ${capture.hold_id}`;
        await finishCapture(hold!, capture, background(`recovery-${capture.id}`)).then(() => finished++, (err: unknown) => log.warn({ capture_id: capture.id, err: (err as Error).message }, "could not finish a capture"));
      }
      for (const hold of await sql<HoldRow[]>`select * from holds where status = 'releasing' and updated_at < ${stale} limit 100`) {
        await finishRelease(hold, background(`recovery-${hold.id}`)).then(() => finished++, (err: unknown) => log.warn({ hold_id: hold.id, err: (err as Error).message }, "could not finish a release"));
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
