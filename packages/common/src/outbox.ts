import { toBinary } from "@bufbuild/protobuf";
import { EventSchema, type Event } from "@ledger/proto/events/v1/events_pb.js";
import type { Logger } from "pino";
import { Counter, Gauge } from "prom-client";
import { backgroundLoop } from "./background-loop.js";
import { installationOf, pipelinedTransaction, type Installation, type Sql, type Tx } from "./db.js";
import { metricsRegistry } from "./metrics.js";
import {
  ensureEventStream,
  eventSubject,
  publishAcked,
  StreamFullError,
  StreamRoom,
  storedSize,
  type NatsHandle,
  type StreamMessage,
  type StreamSettings,
} from "./nats.js";

const published = new Counter({
  name: "outbox_published_total",
  help: "Events the outbox relay published to JetStream.",
  labelNames: ["service"],
  registers: [metricsRegistry],
});

const relayTransactions = new Counter({
  name: "outbox_relay_transactions_total",
  help: 'Relay transactions that ended, by whether they found events to publish (found="events") or none (found="none": a poll, or rows another lane or replica held).',
  labelNames: ["service", "found"],
  registers: [metricsRegistry],
});

const publishErrors = new Counter({
  name: "outbox_publish_errors_total",
  help: 'Relay batches that failed to publish and will be retried, by reason: "stream_full" (the event stream is at its max_bytes and refuses new events) or "other".',
  labelNames: ["service", "reason"],
  registers: [metricsRegistry],
});

const outboxes = new Map<string, Sql>();
new Gauge({
  name: "outbox_backlog",
  help: "Events committed but not yet published.",
  labelNames: ["service"],
  registers: [metricsRegistry],
  async collect() {
    for (const [service, sql] of outboxes) {
      // Events, not rows: a row holds every event of one write.
      const [row] = await sql<{ n: bigint }[]>`select coalesce(sum(events), 0)::int8 as n from outbox_writes`.catch(() => [{ n: -1n }]);
      this.set({ service }, Number(row!.n));
    }
  },
});
new Gauge({
  name: "outbox_oldest_age_seconds",
  help: "Age of the oldest unpublished event; grows when NATS is unreachable.",
  labelNames: ["service"],
  registers: [metricsRegistry],
  async collect() {
    for (const [service, sql] of outboxes) {
      const [row] = await sql<{ age: number | null }[]>`
        select extract(epoch from now() - min(created_at))::float8 as age from outbox_writes`.catch(() => [{ age: null }]);
      this.set({ service }, row!.age ?? 0);
    }
  },
});

/**
 * One outbox row: every event of one write, in order, as one row of the service's `outbox_writes`
 * table. Payloads go as base64 text (one `text[]` parameter); `outboxRowValues` turns them back
 * into bytes, in order.
 */
export interface OutboxWrite {
  eventIds: string[];
  subjects: string[];
  payloads: string[];
}

/** An `OutboxWrite` of already encoded events. */
export function outboxWrite(events: ReadonlyArray<{ id: string; subject: string; payload: Uint8Array }>): OutboxWrite {
  return {
    eventIds: events.map((e) => e.id),
    subjects: events.map((e) => e.subject),
    payloads: events.map((e) => Buffer.from(e.payload.buffer, e.payload.byteOffset, e.payload.byteLength).toString("base64")),
  };
}

/**
 * The values of one `outbox_writes` row, for `insert into outbox_writes (events, event_ids,
 * subjects, payloads) select <these>` inside a statement of the caller's own (a fragment, sent
 * with that statement).
 */
export function outboxRowValues(tx: Tx, write: OutboxWrite) {
  return tx`${write.eventIds.length}::int, ${write.eventIds}::text[], ${write.subjects}::text[],
    array(select decode(p, 'base64') from unnest(${write.payloads}::text[]) with ordinality as u(p, n) order by n)`;
}

/** Options of `createOutbox`. Each service has an `outbox_writes` table in its own schema. */
export interface OutboxOptions {
  service: string;
  sql: Sql;
  nats: NatsHandle;
  stream: StreamSettings;
  log: Logger;
  /**
   * Events one relay transaction publishes, all in flight together; about, since it takes whole
   * rows (at least one).
   */
  batchSize?: number;
  /** Relay transactions in flight at once in this process (each takes its own rows). */
  lanes?: number;
  /** How often to look for rows written by other replicas when nothing woke the relay. */
  pollMs?: number;
  /**
   * The table has an `account_id` column, part of its key: `enqueue` writes one row per account of
   * the events (each event's `accountId`), so a row lives with its account's other rows (the
   * ledger's, docs/scaling.md). The relay reads and deletes rows by `seq` either way.
   */
  rowsByAccount?: boolean;
}

/**
 * The transactional outbox (docs/architecture.md#the-transactional-outbox-and-the-relay): `enqueue` writes events in the caller's
 * transaction, so an event exists exactly when its state change committed; the relay publishes
 * them to JetStream with `Nats-Msg-Id` = event id and deletes them once JetStream has acked.
 */
export interface Outbox {
  /** Inserts the events as one row in `tx`; the statement is sent at once, the promise is its answer. */
  enqueue(tx: Tx, events: Event[]): Promise<void>;
  /** The row `enqueue` would insert, for a caller that writes it in a statement of its own. */
  writeOf(events: Event[]): OutboxWrite;
  /** Tells the relay that new rows committed, so it need not wait for its next poll. */
  wake(): void;
  start(): void;
  /** Stops the relay after one last attempt to flush what is committed. */
  stop(): Promise<void>;
}

/** The row `enqueue` inserts for `events`: their ids, subjects and encoded messages, in order. */
function outboxWriteOf(stream: StreamSettings, events: Event[]): OutboxWrite {
  return outboxWrite(
    events.map((event) => ({
      id: event.id,
      subject: eventSubject(stream.subjectPrefix, event.type),
      payload: toBinary(EventSchema, event),
    })),
  );
}

/** Inserts the events in `tx`: one row, or one row per account of the events with `rowsByAccount`. */
function enqueueEvents(options: OutboxOptions, tx: Tx, events: Event[]): Promise<void> {
  if (events.length === 0) return Promise.resolve();
  // Sent at once, so a pipelined transaction can put its COMMIT right behind it.
  if (!options.rowsByAccount) {
    return tx`insert into outbox_writes (events, event_ids, subjects, payloads) select ${outboxRowValues(tx, outboxWriteOf(options.stream, events))}`
      .execute()
      .then(() => {});
  }
  const byAccount = new Map<string, Event[]>();
  for (const event of events) {
    const list = byAccount.get(event.accountId);
    if (list) list.push(event);
    else byAccount.set(event.accountId, [event]);
  }
  return Promise.all(
    [...byAccount].map(([accountId, list]) =>
      tx`insert into outbox_writes (account_id, events, event_ids, subjects, payloads)
             select ${accountId}, ${outboxRowValues(tx, outboxWriteOf(options.stream, list))}`.execute(),
    ),
  ).then(() => {});
}

/**
 * What the relay's lanes share: whether the stream was checked, whether JetStream last refused a
 * batch because the stream is full, and the room the batches in flight take in it.
 */
class Relay {
  private streamReady = false;
  // Set while JetStream refuses publishes because the stream is full: a batch then asks with its
  // first event alone, so a full stream is asked once a retry, not a thousand times.
  private streamFull = false;
  private readonly room: StreamRoom;
  private installation: Installation | undefined;

  constructor(
    private readonly options: OutboxOptions,
    private readonly batchSize: number,
  ) {
    this.room = new StreamRoom(options.stream.name);
  }

  /** Publishes one batch of committed rows and deletes them once JetStream acked every event; answers how many. */
  async publishBatch(): Promise<number> {
    const { sql, log } = this.options;
    const nc = this.options.nats.current();
    if (!nc || nc.isClosed()) throw new Error("NATS is not connected");
    if (!this.streamReady) {
      // Never into another installation's stream: its refusal fails every batch, and the events wait here.
      this.installation ??= await installationOf(sql);
      await ensureEventStream(nc, this.options.stream, [this.installation], log, { applyLimits: false });
      this.streamReady = true;
    }
    // One pipelined transaction: BEGIN goes out with the select, and the delete with COMMIT, so
    // a batch waits on Postgres twice (an empty look too) instead of four times, and sends as
    // many writes (docs/decisions/pipelined-transactions.md).
    const count = await pipelinedTransaction(sql, async (tx, writes) => {
      // SKIP LOCKED lets lanes and replicas relay side by side without publishing a row twice at
      // once. A row holds the events of one write; the limit takes the rows, in order, whose events
      // before them number under batchSize, counted on the first rows whether another lane holds
      // them or not (so a second lane takes about as many events further on).
      // A row is deleted only in the transaction that saw every publish of its batch acked;
      // a publish that fails rolls the batch back, and its rows go again whole under the same msgIDs,
      // which JetStream's duplicate window drops for those that did land.
      // The events come back one per result row (unnest keeps their order): postgres.js reads a
      // `bytea` column natively but a `bytea[]` one character at a time, which cost the ledger more
      // than the rows saved (docs/decisions/outbox-one-row-per-write.md).
      const events = await tx<{ seq: bigint; event_id: string; subject: string; payload: Uint8Array }[]>`
        with taken as (
          select seq, event_ids, subjects, payloads from outbox_writes order by seq
          limit (select greatest(count(*), 1) from (
            select sum(events) over (order by seq) - events as before from outbox_writes order by seq limit ${this.batchSize}) c
            where before < ${this.batchSize})
          for update skip locked)
        select t.seq, u.event_id, u.subject, u.payload
        from taken t, unnest(t.event_ids, t.subjects, t.payloads) with ordinality as u(event_id, subject, payload, n)
        order by t.seq, u.n`;
      if (events.length === 0) return 0;
      const messages: StreamMessage[] = events.map((e) => ({ subject: e.subject, payload: e.payload, msgId: e.event_id }));
      const seqs = [...new Set(events.map((e) => `${e.seq}`))];
      await this.room.take(
        nc,
        messages.reduce((sum, m) => sum + storedSize(m), 0),
      );
      if (this.streamFull) {
        await publishAcked(nc, messages.slice(0, 1), 5_000);
        this.streamFull = false;
        log.info({ stream: this.options.stream.name }, "the event stream takes events again; the outbox drains");
      }
      // The first event again if it was just asked: JetStream drops the second copy by its id.
      await publishAcked(nc, messages, 5_000);
      // One array parameter, not one parameter per row. Sent now; COMMIT follows it at once, and
      // the batch counts only if both succeed.
      writes.push(tx`delete from outbox_writes where seq = any(${seqs}::int8[])`.execute());
      return messages.length;
    });
    relayTransactions.inc({ service: this.options.service, found: count > 0 ? "events" : "none" });
    if (count > 0) published.inc({ service: this.options.service }, count);
    return count;
  }

  /** After a failed batch: the stream is checked again, and a full one is said once until it takes events. */
  failed(err: unknown): void {
    const { log } = this.options;
    this.streamReady = false;
    const full = err instanceof StreamFullError;
    publishErrors.inc({ service: this.options.service, reason: full ? "stream_full" : "other" });
    if (full && !this.streamFull) {
      log.error(
        { stream: this.options.stream.name, limits: this.options.stream.limits },
        "the event stream is full and refuses new events: they wait in the outbox, writes still commit; " +
          "raise NATS_STREAM_MAX_BYTES or lower NATS_STREAM_MAX_AGE_HOURS (docs/operations.md#sizing-the-event-stream)",
      );
    }
    this.streamFull = full;
  }
}

/** Creates the outbox of one service. */
export function createOutbox(options: OutboxOptions): Outbox {
  const { log } = options;
  // 1,000 events with all their publishes in flight, in two lanes: one lane selects and deletes
  // while the other waits for JetStream's acks; smaller batches in one lane published a burst
  // several times slower (docs/decisions/relay-batched-publish.md).
  const batchSize = options.batchSize ?? 1_000;
  const lanes = options.lanes ?? 2;
  const pollMs = options.pollMs ?? 250;
  const relay = new Relay(options, batchSize);

  // Each lane is a loop of its own: it publishes batch after batch while they come full, polls
  // when one comes short, and backs off up to 2 s while NATS or the database fails. It starts
  // after 100 ms, by when NATS has usually connected, so a start does not log a failure.
  const laneLoops = Array.from({ length: lanes }, () =>
    backgroundLoop({
      name: "outbox relay",
      log,
      iteration: async () => (await relay.publishBatch()) >= batchSize,
      idleMs: pollMs,
      backoff: { firstMs: 400, maxMs: 2_000 },
      firstDelayMs: 100,
      onFailure: (err) => relay.failed(err),
      failureMessage: "outbox relay cannot publish; events are kept and retried",
    }),
  );
  // A commit wakes one idle lane if there is one: waking every lane sent the others to find the
  // rows taken (SKIP LOCKED), a transaction for nothing per commit. With none idle, every lane
  // looks again when its batch ends.
  const wake = () => {
    const idle = laneLoops.find((lane) => lane.idle);
    if (idle) idle.wake();
    else for (const lane of laneLoops) lane.wake();
  };

  return {
    enqueue: (tx, events) => enqueueEvents(options, tx, events),
    writeOf: (events) => outboxWriteOf(options.stream, events),
    wake,
    start() {
      outboxes.set(options.service, options.sql);
      for (const lane of laneLoops) lane.start();
    },
    async stop() {
      await Promise.all(laneLoops.map((lane) => lane.stop()));
      outboxes.delete(options.service);
      // A last flush so a clean shutdown leaves nothing behind while NATS is up.
      const deadline = Date.now() + 5_000;
      while (Date.now() < deadline) {
        try {
          if ((await relay.publishBatch()) === 0) break;
        } catch {
          break;
        }
      }
    },
  };
}
