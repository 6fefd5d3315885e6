import { fromBinary } from "@bufbuild/protobuf";
import {
  AckPolicy,
  DeliverPolicy,
  jetstream,
  jetstreamManager,
  type ConsumerMessages,
  type JetStreamManager,
  type JsMsg,
} from "@nats-io/jetstream";
import {
  backgroundLoop,
  ensureEventStream,
  installationOf,
  isId,
  metricsRegistry,
  recordFailure,
  SpanKind,
  startSpan,
  type Installation,
  type Logger,
  type NatsHandle,
  type Sql,
  type StreamSettings,
  type TracedSpan,
  type Tracing,
} from "@ledger/common";
import { Gauge } from "prom-client";
import { EventSchema, type Event } from "@ledger/proto/events/v1/events_pb.js";
import { ingestEvents } from "./events.js";

// How far the consumer is behind the stream, read from JetStream when /metrics is scraped.
const lagSources = new Set<() => Promise<number>>();
new Gauge({
  name: "jetstream_consumer_pending",
  help: "Events on the stream not yet stored by this service (pending plus delivered but unacknowledged).",
  registers: [metricsRegistry],
  async collect() {
    let pending = 0;
    for (const source of lagSources) pending += await source().catch(() => 0);
    this.set(pending);
  },
});

// Events pulled and stored per transaction: one insert of many rows, then every ack at once.
// JetStream lets MAX_ACK_PENDING be out unacked, so one batch is stored while the next arrives.
// Every unacked message sits in this process with its decoded event until its batch commits: with
// larger batches a backlog's drain held thousands of them, a large part of the live heap, and 250
// drains as fast (docs/decisions/event-consumer-batches.md).
const STORE_BATCH = 250;
export const MAX_ACK_PENDING = 4 * STORE_BATCH;

/** Options of the event consumer. */
export interface ConsumerOptions {
  sql: Sql;
  nats: NatsHandle;
  stream: StreamSettings;
  log: Logger;
  /** Called after events committed, so the delivery loop looks at once. */
  onIngested: () => void;
  /** When set, storing an event is a span in the trace of the call that caused it. */
  tracing?: Tracing | undefined;
}

/** The durable JetStream consumer of one process; every replica shares it, as a work queue. */
export interface EventConsumer {
  start(): void;
  stop(): Promise<void>;
}

/** The durable name: per stream, so installations (and test stacks) sharing NATS do not collide. */
export function consumerName(stream: string): string {
  return `notification_${stream}`;
}

function isPoison(event: Event): string | undefined {
  if (!isId("event", event.id)) return "id is not an event id";
  if (!event.accountId) return "no account_id";
  if (!/^[a-z]+\.[a-z_]+$/.test(event.type)) return "malformed type";
  return undefined;
}

/** Messages stored together, each with its decoded event. */
type Batch = Array<{ m: JsMsg; event: Event }>;

/** Makes the durable consumer, or sets how many messages it lets be out unacknowledged. */
async function ensureDurableConsumer(jsm: JetStreamManager, stream: StreamSettings, name: string): Promise<void> {
  try {
    const info = await jsm.consumers.info(stream.name, name);
    // A consumer made by an earlier version may let another number be out at once; set ours.
    if (info.config.max_ack_pending !== MAX_ACK_PENDING)
      await jsm.consumers.update(stream.name, name, { max_ack_pending: MAX_ACK_PENDING });
  } catch (err) {
    if (!/not found/i.test(String((err as Error).message))) throw err;
    await jsm.consumers.add(stream.name, {
      durable_name: name,
      ack_policy: AckPolicy.Explicit,
      deliver_policy: DeliverPolicy.All,
      filter_subject: `${stream.subjectPrefix}.events.>`,
      ack_wait: 30_000_000_000,
      max_ack_pending: MAX_ACK_PENDING,
    });
  }
}

// One span per event, a child of the span that committed it, so the trace of a call goes on
// across JetStream; the event is stored with the new span's traceparent for its deliveries.
function startStoreSpans(tracing: Tracing | undefined, batch: Batch): Map<string, TracedSpan> | undefined {
  if (!tracing) return undefined;
  const spans = new Map<string, TracedSpan>();
  for (const { m, event } of batch) {
    // A message redelivered into the same batch is stored once, so it gets one span.
    if (spans.has(event.id)) continue;
    const attributes = {
      "messaging.system": "nats",
      "messaging.operation.name": "process",
      "messaging.destination.name": m.subject,
      "messaging.message.id": event.id,
      "event.type": event.type,
    };
    spans.set(
      event.id,
      startSpan(tracing, `process ${event.type}`, SpanKind.CONSUMER, { traceparent: event.traceparent, tracestate: "" }, attributes),
    );
  }
  return spans;
}

/**
 * Stores a batch in one transaction and acks its messages once it committed. When the transaction
 * fails, stores them one by one, and naks the one that fails alone so JetStream redelivers it later.
 */
async function storeBatch(options: ConsumerOptions, batch: Batch): Promise<void> {
  const { log, sql } = options;
  const spans = startStoreSpans(options.tracing, batch);
  let failure: string | undefined = "store_failed";
  try {
    const queued = await ingestEvents(
      sql,
      batch.map((b) => b.event),
      spans ? (event) => spans.get(event.id)!.link.traceparent : undefined,
    );
    failure = undefined;
    for (const b of batch) b.m.ack();
    if (queued > 0) options.onIngested();
  } catch (err) {
    if (batch.length > 1) {
      // One event the database refuses must not hold back the others: store them one by one.
      for (const b of batch) await storeBatch(options, [b]);
      return;
    }
    log.warn({ event_id: batch[0]!.event.id, err: (err as Error).message }, "storing an event failed; it will be redelivered");
    batch[0]!.m.nak(2_000);
  } finally {
    for (const { span } of spans?.values() ?? []) {
      if (failure) recordFailure(span, failure);
      span.end();
    }
  }
}

/**
 * Reads every event of the stream and stores it (ingestEvents is idempotent per event id). A message
 * is acked only after its transaction committed; a passing fault (the database is down) naks it
 * with a delay so JetStream redelivers it; a message that can never be stored is terminated.
 * Starting does not wait for NATS: the loop connects when NATS is there and catches up from the
 * consumer's position.
 */
export function createEventConsumer(options: ConsumerOptions): EventConsumer {
  const { log, sql } = options;
  const name = consumerName(options.stream.name);
  let messages: ConsumerMessages | undefined;
  let lag: () => Promise<number> = async () => 0;
  let installation: Installation | undefined;

  async function consumeOnce(): Promise<void> {
    const nc = await options.nats.connected();
    // The durable consumer is shared by every process that reads the stream for this database:
    // another installation's would take part of its events, so its stream is refused.
    installation ??= await installationOf(sql);
    await ensureEventStream(nc, options.stream, [installation], log, { applyLimits: false });
    const jsm = await jetstreamManager(nc);
    await ensureDurableConsumer(jsm, options.stream, name);
    const consumer = await jetstream(nc).consumers.get(options.stream.name, name);
    lagSources.delete(lag);
    lag = async () => {
      const info = await jsm.consumers.info(options.stream.name, name);
      return info.num_pending + info.num_ack_pending;
    };
    lagSources.add(lag);
    messages = await consumer.consume({ max_messages: STORE_BATCH });
    if (!loop.running) messages.stop();
    for await (const m of messages) {
      let event: Event;
      try {
        event = fromBinary(EventSchema, m.data);
      } catch (err) {
        log.error({ subject: m.subject, seq: m.seq, err: (err as Error).message }, "event message is not an events.v1.Event; dropping it");
        m.term("not an events.v1.Event");
        continue;
      }
      const poison = isPoison(event);
      if (poison) {
        log.error({ subject: m.subject, seq: m.seq, event_id: event.id, reason: poison }, "event cannot be stored; dropping it");
        m.term(poison);
        continue;
      }
      pending.push({ m, event });
      flushing ??= flush();
    }
    await flushing;
  }

  // Messages that arrive while a transaction stores the previous ones wait and go together in
  // the next: one transaction per burst, not per event.
  const pending: Batch = [];
  let flushing: Promise<void> | undefined;
  async function flush(): Promise<void> {
    while (pending.length > 0) await storeBatch(options, pending.splice(0, STORE_BATCH));
    flushing = undefined;
  }

  // One iteration consumes until the subscription ends (stop, or NATS went away); then, after a
  // pause, the next subscribes again from the consumer's position.
  const loop = backgroundLoop({
    name: "event consumer",
    log,
    iteration: async () => {
      await consumeOnce();
      return false;
    },
    idleMs: 250,
    backoff: { firstMs: 500, maxMs: 2_000 },
    failureMessage: "event consumer stopped; restarting",
    // One iteration is the subscription, which lasts as long as NATS does.
    stallWarnMs: 0,
  });

  return {
    start: () => loop.start(),
    async stop() {
      const stopped = loop.stop();
      lagSources.delete(lag);
      messages?.stop();
      // connected() never resolves while NATS stays down; do not wait on it for ever.
      await Promise.race([stopped, new Promise((resolve) => setTimeout(resolve, 5_000))]);
    },
  };
}
