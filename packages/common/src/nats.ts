import { DiscardPolicy, jetstreamManager, type StreamConfig } from "@nats-io/jetstream";
import { connect, createInbox, headers, nanos, type ConnectionOptions, type Msg, type NatsConnection } from "@nats-io/transport-node";
import type { Logger } from "pino";
import type { Installation } from "./db.js";

/**
 * A NATS connection that is made in the background and kept alive for the life of the process.
 * Services start and accept writes while NATS is down; the outbox holds their events until it is back.
 */
export interface NatsHandle {
  /** Resolves once the first connection succeeds. */
  connected(): Promise<NatsConnection>;
  /** The connection, when one has been made. */
  current(): NatsConnection | undefined;
  /** Whether the server answers a round trip now. */
  ping(): Promise<boolean>;
  /** Drains pending messages and closes. */
  close(): Promise<void>;
}

/** Where NATS is and how to prove who we are to it (InfraConfig's NATS_* settings). */
export interface NatsConnectionSettings {
  natsUrl: string;
  natsUser?: string | undefined;
  natsPassword?: string | undefined;
  natsTlsCa?: string | undefined;
}

/**
 * The connection options every process uses, so the services and the migration Job connect the
 * same way: the server, the user and password when set, and TLS trusting NATS_TLS_CA when set
 * (a `tls://` URL asks for TLS with the system's CAs).
 */
export function natsConnectionOptions(settings: NatsConnectionSettings): ConnectionOptions {
  return {
    // One server, or a cluster's servers comma-separated; the client learns the rest of a cluster from any one.
    servers: settings.natsUrl.split(",").map((url) => url.trim()),
    ...(settings.natsUser !== undefined ? { user: settings.natsUser, pass: settings.natsPassword ?? "" } : {}),
    ...(settings.natsTlsCa !== undefined ? { tls: { caFile: settings.natsTlsCa } } : {}),
  };
}

/** Opens a NATS connection that retries for ever, logging when it goes down and comes back. */
export function connectNats(settings: NatsConnectionSettings, name: string, log: Logger): NatsHandle {
  let nc: NatsConnection | undefined;
  let closing = false;
  const first = connect(
    Object.assign({}, natsConnectionOptions(settings), {
      name,
      waitOnFirstConnect: true,
      maxReconnectAttempts: -1,
      reconnectTimeWait: 500,
      pingInterval: 10_000,
    }),
  ).then((conn) => {
    nc = conn;
    log.info({ server: conn.getServer() }, "connected to NATS");
    void (async () => {
      for await (const status of conn.status()) {
        if (status.type === "disconnect") log.warn({ server: status.server }, "NATS connection lost; retrying");
        else if (status.type === "reconnect") log.info({ server: status.server }, "NATS connection restored");
      }
    })();
    return conn;
  });
  first.catch((err: unknown) => {
    if (!closing) log.error({ err }, "NATS connection failed for good");
  });
  return {
    connected: () => first,
    current: () => nc,
    async ping() {
      if (!nc || nc.isClosed()) return false;
      try {
        await nc.flush();
        return true;
      } catch {
        return false;
      }
    },
    async close() {
      closing = true;
      if (nc && !nc.isClosed()) await nc.drain().catch(() => nc?.close());
    },
  };
}

/** Settings of the stream that carries every domain event (docs/architecture.md#the-transactional-outbox-and-the-relay). */
export interface StreamSettings {
  name: string;
  subjectPrefix: string;
  /**
   * How much the stream holds (NATS_STREAM_*, docs/operations.md#sizing-the-event-stream). Every
   * process that may create the stream brings it to these: replicas are raised, never lowered; the
   * byte and age limits are set as given. Left out (tests), STREAM_LIMITS.
   */
  limits?: StreamLimits;
}

export interface StreamLimits {
  /** Copies of every event across a NATS cluster: 1 on one server, 3 on deploy/base/nats.yaml's cluster. */
  replicas: number;
  /** Bytes the stream may hold. When full it refuses new events (never drops stored ones): they wait in the outboxes. */
  maxBytes: number;
  /** How long the stream keeps an event, the only way it frees space by itself. */
  maxAgeHours: number;
}

/** The limits when none are configured: one server, 1 GiB, a week. */
export const STREAM_LIMITS: StreamLimits = { replicas: 1, maxBytes: 1024 ** 3, maxAgeHours: 7 * 24 };

/** The subject an event of `type` is published on, for example `ledger.events.transaction.posted`. */
export function eventSubject(prefix: string, type: string): string {
  return `${prefix}.events.${type}`;
}

/**
 * A process was about to use an event stream whose events, for its service, belong to another
 * installation's database: two installations on one stream would each take part of the other's
 * events. Its message says which stream, whose it is and what to set.
 */
export class StreamOfAnotherInstallation extends Error {
  constructor(stream: string, owner: Installation, other: { id: string; database: string }) {
    super(
      `NATS stream ${stream} belongs to another installation: its ${owner.schema} events are those of ` +
        `installation ${other.id} (database ${other.database}), and this ${owner.schema} database is installation ` +
        `${owner.id} (database ${owner.database}). Two installations on one stream would each take part of the ` +
        "other's events. Give each installation a stream of its own: set NATS_STREAM and NATS_SUBJECT_PREFIX to " +
        "names no other installation uses (docs/operations.md#one-stream-per-installation).",
    );
    this.name = "StreamOfAnotherInstallation";
  }
}

// The stream's description names, per service schema, the installation whose events it carries:
// `ledger=<id> (<database>)`. A description, not JetStream's metadata, which NATS 2.9 does not keep.
const CLAIM = /\b([a-z][a-z0-9_]*)=([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})(?: \(([^()]*)\))?/g;

type Claims = Map<string, { id: string; database: string }>;

function claimsOf(description: string | undefined): Claims {
  const claims: Claims = new Map();
  for (const [, schema, id, database] of (description ?? "").matchAll(CLAIM))
    claims.set(schema!, { id: id!, database: database ?? "unknown" });
  return claims;
}

function describeClaims(claims: Claims): string {
  const named = [...claims].sort(([a], [b]) => a.localeCompare(b));
  return `Events of one ledger installation; its databases, by service: ${named
    .map(([schema, { id, database }]) => `${schema}=${id} (${database.replace(/[()]/g, "")})`)
    .join(", ")}`;
}

function refuseAnotherInstallation(stream: string, claims: Claims, owners: readonly Installation[]): void {
  for (const owner of owners) {
    const claim = claims.get(owner.schema);
    if (claim && claim.id !== owner.id) throw new StreamOfAnotherInstallation(stream, owner, claim);
  }
}

/**
 * Creates the event stream, or checks that it is this installation's and brings its subjects up
 * to date: the one function every process that publishes to or consumes the stream calls before
 * it does (relays, the notification consumer, the service shell at start, the migration Job).
 * `owners` are the installations of the caller's databases, one per service schema (the Job has
 * all three); the stream records each in its description when it is made, or, for a schema it
 * names no installation for (a stream of an earlier version, or another service of the same
 * installation made it), when first used. A stream that names another installation for one of
 * them is refused with StreamOfAnotherInstallation.
 *
 * The duplicate window is what makes a relay's re-publish after a crash harmless: JetStream drops
 * a second message with the same id.
 *
 * A stream made here gets `settings.limits`. An existing one is brought to them only with
 * `applyLimits` (a service's start, the migration Job): the relays and the consumer check the stream
 * again after every failure, and must not undo a limit an operator raised by hand on a full stream.
 */
export async function ensureEventStream(
  nc: NatsConnection,
  settings: StreamSettings,
  owners: readonly Installation[],
  log: Logger,
  { applyLimits }: { applyLimits: boolean },
): Promise<void> {
  const jsm = await jetstreamManager(nc);
  const subject = `${settings.subjectPrefix}.events.>`;
  const limits = settings.limits ?? STREAM_LIMITS;
  let info = await jsm.streams.info(settings.name).catch((err: unknown) => {
    if (/not found/i.test(String((err as Error).message))) return undefined;
    throw err;
  });
  if (!info) {
    try {
      await jsm.streams.add({
        name: settings.name,
        subjects: [subject],
        duplicate_window: nanos(10 * 60 * 1000),
        ...limitsConfig(limits),
        description: describeClaims(new Map(owners.map((o) => [o.schema, { id: o.id, database: o.database }]))),
      });
      return;
    } catch (err) {
      // Another process made it first, with other claims: they are checked below.
      if (!/already in use/i.test(String((err as Error).message))) throw err;
      info = await jsm.streams.info(settings.name);
    }
  }
  const claims = claimsOf(info.config.description);
  refuseAnotherInstallation(settings.name, claims, owners);
  const unclaimed = owners.filter((owner) => !claims.has(owner.schema));
  const subjects = info.config.subjects ?? [];
  const changedLimits = applyLimits ? limitChanges(info.config, limits) : {};
  if (unclaimed.length === 0 && subjects.includes(subject) && Object.keys(changedLimits).length === 0) return;
  for (const owner of unclaimed) claims.set(owner.schema, { id: owner.id, database: owner.database });
  await jsm.streams.update(
    settings.name,
    Object.assign({}, info.config, changedLimits, {
      subjects: subjects.includes(subject) ? subjects : [...subjects, subject],
      description: describeClaims(claims),
    }),
  );
  if (Object.keys(changedLimits).length > 0)
    log.info({ stream: settings.name, ...limits }, "brought the event stream's limits to the configured ones");
  for (const owner of unclaimed) {
    log.info(
      { stream: settings.name, schema: owner.schema, installation: owner.id, database: owner.database },
      `the event stream named no installation for ${owner.schema} events; it now names this database's`,
    );
  }
  // Two installations that claimed the stream at once: the last update stands, and the other learns it here.
  if (unclaimed.length > 0)
    refuseAnotherInstallation(settings.name, claimsOf((await jsm.streams.info(settings.name)).config.description), owners);
}

/** The stream configuration of `limits`: a full stream refuses new messages and keeps what it holds. */
function limitsConfig(limits: StreamLimits): Pick<StreamConfig, "num_replicas" | "max_bytes" | "max_age" | "discard"> {
  return {
    num_replicas: limits.replicas,
    max_bytes: limits.maxBytes,
    max_age: nanos(limits.maxAgeHours * 60 * 60 * 1000),
    discard: DiscardPolicy.New,
  };
}

/** What an existing stream's configuration must change to meet `limits` (replicas are only raised). */
function limitChanges(config: StreamConfig, limits: StreamLimits): Partial<StreamConfig> {
  const want = limitsConfig(limits);
  const changes: Partial<StreamConfig> = {};
  if (config.num_replicas < want.num_replicas) changes.num_replicas = want.num_replicas;
  if (config.max_bytes !== want.max_bytes) changes.max_bytes = want.max_bytes;
  if (config.max_age !== want.max_age) changes.max_age = want.max_age;
  if (config.discard !== want.discard) changes.discard = want.discard;
  return changes;
}

/**
 * Keeps a publisher off the last bytes of a stream's `max_bytes`. NATS servers before 2.10.5 take
 * a message that does not quite fit a stream with the discard policy `new` and then drop the
 * stream's oldest message to make room (nats-server#4771, fixed by #4772): a full stream would lose
 * events it had acknowledged. So a batch is published only when the stream has room for it and a
 * margin (a hundredth of the limit, at least 64 KiB, at most a quarter), and otherwise refused here
 * with StreamFullError, as the server would refuse it. The free space is asked of the server at most
 * once a second while it is plentiful, and before every batch near the limit; what this process
 * published since is taken off the last answer, and the margin covers what other publishers did.
 */
export class StreamRoom {
  #free = Number.POSITIVE_INFINITY;
  #limit = -1;
  #askedAt = 0;

  constructor(private readonly stream: string) {}

  /** Takes room for `bytes` on the stream, or throws StreamFullError when the stream has too little. */
  async take(nc: NatsConnection, bytes: number): Promise<void> {
    const margin = this.#margin();
    if (Date.now() - this.#askedAt >= 1_000 || this.#free - bytes < 4 * margin) await this.#ask(nc);
    if (this.#free - bytes < this.#margin()) {
      throw new StreamFullError(
        `the stream has ${this.#free} of its ${this.#limit} bytes free, too little for a batch of ${bytes} and the margin the relay keeps`,
      );
    }
    this.#free -= bytes;
  }

  #margin(): number {
    if (this.#limit <= 0) return 0;
    return Math.min(this.#limit / 4, Math.max(64 * 1024, this.#limit / 100));
  }

  async #ask(nc: NatsConnection): Promise<void> {
    const info = await (await jetstreamManager(nc, { checkAPI: false })).streams.info(this.stream);
    this.#limit = info.config.max_bytes;
    this.#free = this.#limit > 0 ? this.#limit - info.state.bytes : Number.POSITIVE_INFINITY;
    this.#askedAt = Date.now();
  }
}

/** About what a message takes in the stream: its bytes, subject and id, and the store's own record. */
export function storedSize(message: StreamMessage): number {
  return message.payload.byteLength + message.subject.length + message.msgId.length + 96;
}

/** A message for `publishAcked`: where it goes, its bytes, and the id JetStream deduplicates it by. */
export interface StreamMessage {
  subject: string;
  payload: Uint8Array;
  msgId: string;
}

/**
 * Publishes messages to JetStream, all in flight at once, and resolves when JetStream acknowledged
 * every one of them; rejects at the first refusal, or when some are not acknowledged within
 * `timeoutMs`. One reply subscription and one timer serve the whole set: `js.publish` makes a
 * request per message, each with its own timer and error objects, which was the largest part of
 * the relay's CPU (docs/decisions/relay-batched-publish.md).
 */
export function publishAcked(nc: NatsConnection, messages: readonly StreamMessage[], timeoutMs: number): Promise<void> {
  if (messages.length === 0) return Promise.resolve();
  return new Promise<void>((resolve, reject) => {
    const inbox = createInbox();
    const acked = new Uint8Array(messages.length);
    let waiting = messages.length;
    let done = false;
    const finish = (err?: Error) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      sub.unsubscribe();
      if (err) reject(err);
      else resolve();
    };
    const timer = setTimeout(
      () => finish(new Error(`JetStream acknowledged ${messages.length - waiting} of ${messages.length} publishes within ${timeoutMs} ms`)),
      timeoutMs,
    );
    const sub = nc.subscribe(`${inbox}.*`, {
      callback: (err, msg) => {
        if (err) return finish(err);
        const refusal = ackRefusal(msg);
        if (refusal) return finish(refusal);
        const i = Number(msg.subject.slice(inbox.length + 1));
        if (!(i >= 0 && i < messages.length) || acked[i]) return;
        acked[i] = 1;
        if (--waiting === 0) finish();
      },
    });
    try {
      messages.forEach((m, i) => {
        const h = headers();
        h.set("Nats-Msg-Id", m.msgId);
        nc.publish(m.subject, m.payload, { reply: `${inbox}.${i}`, headers: h });
      });
    } catch (err) {
      finish(err as Error);
    }
  });
}

/**
 * JetStream refused a publish because the stream is at its `max_bytes` (or message) limit: with
 * the discard policy `new` it keeps what it holds and takes nothing more until space frees.
 */
export class StreamFullError extends Error {
  override name = "StreamFullError";
}

/** Why JetStream did not store a published message, or undefined when its answer is an ack. */
function ackRefusal(msg: Msg): Error | undefined {
  const reason = ackRefusalReason(msg);
  if (reason === undefined) return undefined;
  return /maximum (bytes|messages) exceeded|resource limits exceeded/i.test(reason) ? new StreamFullError(reason) : new Error(reason);
}

function ackRefusalReason(msg: Msg): string | undefined {
  // No stream listens on the subject: the server answers with a 503 status and no body.
  if (msg.headers?.hasError) return `no stream answered the publish (status ${msg.headers.code})`;
  if (msg.data.length === 0) return "empty answer to a JetStream publish";
  let ack: { error?: { description?: string; code?: number } };
  try {
    ack = JSON.parse(msg.string()) as typeof ack;
  } catch {
    return "unreadable answer to a JetStream publish";
  }
  return ack.error ? `JetStream refused a publish: ${ack.error.description ?? ack.error.code}` : undefined;
}
