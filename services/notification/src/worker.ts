import { randomUUID } from "node:crypto";
import type { Logger, Sql, Tracing, Tx } from "@ledger/common";
import { backgroundLoop, metricsRegistry, pipelinedTransaction, recordFailure, retried, SpanKind, startSpan } from "@ledger/common";
import { Counter, Histogram } from "prom-client";
import { signingSecrets } from "./endpoints.js";
import { signatureHeader } from "./webhook-signer.js";
import { sendOnce, type AttemptResult } from "./send.js";

const attemptsTotal = new Counter({
  name: "webhook_attempts_total",
  help: "Delivery attempts, by outcome (succeeded, failed) and error code.",
  labelNames: ["outcome", "error"],
  registers: [metricsRegistry],
});
const attemptDuration = new Histogram({
  name: "webhook_attempt_duration_seconds",
  help: "Duration of delivery attempts.",
  buckets: [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
  registers: [metricsRegistry],
});

/** Settings of the delivery workers. */
export interface WorkerOptions {
  sql: Sql;
  log: Logger;
  secretKey: Buffer;
  timeoutMs: number;
  retryScheduleMs: number[];
  /** Attempts in flight at once in this process, over every destination. */
  concurrency: number;
  allowPrivateNetworks: boolean;
  extraCa?: string;
  userAgent: string;
  /** How often to look for due work when nothing woke the loop. */
  pollMs?: number;
  /**
   * The pause before looking again at a destination another process holds: `firstMs`, doubling
   * while it stays held, at most `maxMs` (default 2 ms up to 50 ms). Tests lengthen it to see the
   * other process's wake alone.
   */
  contendedPauseMs?: { firstMs: number; maxMs: number };
  /** When set, each attempt is a span in the trace of the call that caused the event. */
  tracing?: Tracing | undefined;
}

/** The delivery loop of one process. */
export interface Worker {
  start(): void;
  /** Looks for due work now, for example right after events arrived. */
  wake(): void;
  /** Stops claiming and waits for the attempts in flight. */
  stop(): Promise<void>;
}

interface Claimed {
  id: string;
  endpoint_id: string;
  event_id: string;
  event_type: string;
  request_id: string;
  traceparent: string;
  url: string;
  body: string;
  attempts: number;
  secret: Uint8Array;
  previous_secret: Uint8Array | null;
  previous_active: boolean;
  lease_id: string;
}

/** What an ended attempt writes; many are written together. */
interface Outcome {
  c: Claimed;
  result: AttemptResult;
  succeeded: boolean;
  next: "succeeded" | "failed" | "pending";
  delayMs: number;
  excerpt: string;
}

// Advisory-lock namespace of destination claims (an arbitrary constant of this service).
const CLAIM_LOCK_SPACE = 7_301;
// Destinations looked at per claim, oldest due first.
const CLAIM_ENDPOINTS = 1_000;
// Outcomes written per turn at most; more wait for the next turn.
const OUTCOMES_PER_TURN = 1_000;
// Postgres NOTIFY channel on which a turn that wrote outcomes (so freed leases) tells the other
// processes, which then look again at once instead of waiting out their contended pause.
const SLOTS_FREED_CHANNEL = "webhook_slots_freed";
// The pause before looking again at a destination another process holds (its lock for one turn,
// or its slots until that process's next outcomes): a freed slot usually wakes the loop through
// SLOTS_FREED_CHANNEL first, so the pause only covers a lost notification or a lock held by a
// turn that wrote nothing. It was 2 ms doubling up to the 250 ms poll, and two processes sharing
// one destination then took turns, each waiting out most of a pause (bench/README.md).
const CONTENDED_PAUSE_MS = { firstMs: 2, maxMs: 50 };

/**
 * Leases and outcomes commit without waiting for the WAL flush: they are visible to every other
 * process at once (what keeps one attempt from being sent twice), and only a crash of Postgres
 * itself within its WAL writer's delay could forget one, which makes the attempt go again, as a
 * notification process dying mid-attempt does. Events are stored with full durability (they are
 * acked to JetStream after their commit).
 */
function commitWithoutFlushWait(tx: Tx): Promise<unknown> {
  return tx`set local synchronous_commit = off`.execute();
}

/**
 * The next gap after failed attempt number `attempt` (1-based), or undefined when the delivery
 * fails now: no gap is left, or the destination resolved only to blocked addresses.
 */
export function retryDelayMs(schedule: number[], attempt: number, result: AttemptResult, random = Math.random): number | undefined {
  // An address the policy refuses stays refused: retrying would only knock on it again.
  if (result.error === "blocked_address") return undefined;
  const gap = schedule[attempt - 1];
  if (gap === undefined) return undefined;
  // ±10% jitter, so many deliveries that failed together do not all come back together.
  let delay = Math.round(gap * (0.9 + 0.2 * random()));
  if (result.retryAfterSeconds !== undefined && (result.status === 429 || result.status === 503)) {
    // The receiver's wish, kept within the schedule's own bounds.
    delay = Math.min(Math.max(result.retryAfterSeconds * 1000, Math.min(...schedule)), Math.max(...schedule));
  }
  return delay;
}

/**
 * Creates the workers. Each turn of the loop is one short transaction that writes the outcomes of
 * the attempts answered since the last turn and claims many due deliveries at once, setting a
 * lease (lease_id, and next_attempt_at pushed past the attempt's timeout) before it commits:
 * another process then sees them as not due, so no attempt is sent twice, and a process that
 * dies mid-attempt only leaves leases that run out and are retried.
 *
 * Per destination, at most its `max_concurrency` attempts are leased at once across every
 * process: a claim takes a transaction-scoped advisory lock per destination (skipping those
 * another process is claiming for right now), then counts the destination's live leases in a
 * statement of its own, which therefore sees every lease committed before the lock was granted.
 */
export function createWorker(options: WorkerOptions): Worker {
  const { sql, log } = options;
  const pollMs = options.pollMs ?? 250;
  const contendedPause = options.contendedPauseMs ?? CONTENDED_PAUSE_MS;
  // Names this process in its own notifications, which it ignores.
  const workerId = randomUUID();
  const leaseMs = options.timeoutMs + 30_000;
  // Attempts from claim to written outcome, which stop() waits for.
  const inFlight = new Set<Promise<void>>();
  // Attempts from claim to HTTP answer: what `concurrency` counts. A slot frees when the answer
  // arrives, before its outcome is written. Resolves when the slot frees.
  const sending = new Set<Promise<void>>();
  // Per destination, this process's attempts waiting for an answer.
  const sendingTo = new Map<string, number>();

  // A wake that comes while the loop is busy claiming is kept by the loop, so it looks again at
  // once instead of sleeping through the slots that attempt freed.
  const wake = () => loop.wake();

  /**
   * Leases up to `limit` due deliveries in `tx`; statements whose answer it does not need go
   * into `writes`, sent at once and awaited with the commit. `contended` says some destination
   * with due work got nothing because another process held its lock, its slots or its rows:
   * worth looking again soon.
   */
  async function claimIn(tx: Tx, limit: number, writes: Promise<unknown>[]): Promise<{ claimed: Claimed[]; contended: boolean }> {
    // Prefixed with this process's id, so the claim can tell its own leases from the others'.
    const lease = `${workerId}.${randomUUID()}`;
    // Destinations with due work, oldest due first, locked for this claim; a destination whose
    // lock another process holds is skipped now and looked at by the next claim.
    const candidates = await tx<{ id: string; enabled: boolean; deleted: boolean; max_concurrency: number; locked: boolean }[]>`
      with recursive pending_endpoints(endpoint_id) as (
        -- Each destination with pending deliveries, one index probe apiece (a loose index scan
        -- of deliveries_due_by_endpoint): a destination with a huge backlog costs no more than
        -- one with a single delivery, and cannot hide the others from the claim.
        (select endpoint_id from deliveries where status = 'pending' order by endpoint_id limit 1)
        union all
        select (select d.endpoint_id from deliveries d
                where d.status = 'pending' and d.endpoint_id > p.endpoint_id order by d.endpoint_id limit 1)
        from pending_endpoints p where p.endpoint_id is not null),
      candidates as materialized (
        select en.id, en.enabled, en.deleted_at is not null as deleted, en.max_concurrency, oldest.at as oldest
        from pending_endpoints p
        join endpoints en on en.id = p.endpoint_id
        cross join lateral (
          select d.next_attempt_at as at from deliveries d
          where d.endpoint_id = p.endpoint_id and d.status = 'pending'
          order by d.next_attempt_at limit 1) oldest
        where oldest.at <= now()
        order by oldest.at limit ${CLAIM_ENDPOINTS})
      select id, enabled, deleted, max_concurrency, pg_try_advisory_xact_lock(${CLAIM_LOCK_SPACE}, hashtext(id)) as locked
      from candidates order by oldest`;
    const endpoints = candidates.filter((e) => e.locked);
    let contended = endpoints.length < candidates.length;
    // A destination switched off while its deliveries waited: they stop here (docs/webhooks.md#retries-and-delivery-states).
    for (const e of endpoints.filter((e) => !e.enabled || e.deleted)) {
      writes.push(
        tx`
        update deliveries set status = 'failed', error = ${e.deleted ? "endpoint_deleted" : "endpoint_disabled"},
          next_attempt_at = null, updated_at = now()
        where endpoint_id = ${e.id} and status = 'pending' and next_attempt_at <= now()`.execute(),
      );
    }
    const live = endpoints.filter((e) => e.enabled && !e.deleted);
    if (live.length === 0) return { claimed: [], contended };
    // One statement counts each destination's attempts in flight and takes new leases up to its
    // max_concurrency: the other processes' live leases (it starts after the statement above got
    // the destinations' locks, so its snapshot has every lease another process committed before,
    // and none can commit more until this transaction ends), plus this process's attempts still
    // waiting for an answer, counted in memory. This process's own leases whose answer arrived
    // but whose outcome the next turn writes are no longer in flight, so they no longer hold a
    // slot: the slot frees when the answer arrives, not a turn later. This process's free slots are shared among the destinations one
    // round at a time, oldest due first, so one with a large backlog cannot take them all.
    // Per destination, its oldest due deliveries come through the (endpoint_id, next_attempt_at)
    // index. The due conditions stand on the locked rows themselves, so a row leased after this
    // statement's snapshot is re-read by the lock and dropped, never sent twice.
    const claimed = await tx<Claimed[]>`
      with live as (
        select * from unnest(${live.map((e) => e.id)}::text[], ${live.map((e) => e.max_concurrency)}::int[],
                             ${live.map((e) => sendingTo.get(e.id) ?? 0)}::int[])
          with ordinality as l(endpoint_id, max_concurrency, mine, ord)),
      room as (
        select l.endpoint_id, l.ord, l.max_concurrency - l.mine - (
          select count(*) from deliveries d
          where d.endpoint_id = l.endpoint_id and d.status = 'pending' and d.lease_id is not null
            and d.lease_id not like ${`${workerId}.%`} and d.next_attempt_at > now())::int as room
        from live l),
      quota as (
        select endpoint_id, count(*)::int as n from (
          select r.endpoint_id from room r cross join generate_series(1, r.room) as s(round)
          order by s.round, r.ord limit ${limit}) s
        group by endpoint_id),
      picked as (
        select d.id from quota q cross join lateral (
          select id from deliveries d
          where d.endpoint_id = q.endpoint_id and d.status = 'pending' and d.next_attempt_at <= now()
          order by d.next_attempt_at, d.id
          limit q.n
          for update skip locked) d),
      leased as (
        update deliveries set lease_id = ${lease}, next_attempt_at = now() + make_interval(secs => ${leaseMs / 1000}), updated_at = now()
        where id in (select id from picked)
        returning id, endpoint_id, event_id, attempts)
      select l.id, l.endpoint_id, l.event_id, ev.type as event_type, ev.request_id, ev.traceparent, en.url, ev.body, l.attempts,
             en.secret, en.previous_secret,
             coalesce(en.previous_secret_expires_at > now(), false) as previous_active,
             ${lease} as lease_id
      from leased l
      join endpoints en on en.id = l.endpoint_id
      -- One index lookup per leased row. As a plain join the planner, which expects far more
      -- leased rows than a claim takes, hashed the whole events table once it had grown: 60 MB,
      -- spilled to temporary files, 200 ms a claim (bench/README.md). The LIMIT keeps the
      -- subquery from being merged back into a join.
      cross join lateral (
        select e.type, e.request_id, e.traceparent, e.body from events e where e.id = l.event_id limit 1) ev`;
    if (claimed.length < limit) {
      // A destination that got nothing though this process has room for it: its slots or its
      // due rows are held by another process, which frees them when it writes its outcomes.
      const got = new Set(claimed.map((c) => c.endpoint_id));
      if (live.some((e) => !got.has(e.id) && (sendingTo.get(e.id) ?? 0) < e.max_concurrency)) contended = true;
    }
    return { claimed, contended };
  }

  // Attempts whose answer arrived wait here for the next turn, which writes their outcomes and
  // claims the next deliveries in one transaction: one commit per turn, not one per batch of each.
  const ended: Array<{ outcome: Outcome; done: (err?: unknown) => void }> = [];

  /** Queues an ended attempt's outcome; resolves once it is written. */
  function record(outcome: Outcome): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      ended.push({ outcome, done: (err) => (err ? reject(err) : resolve()) });
      wake();
    });
  }

  /**
   * One turn of the loop: writes the queued outcomes, then leases up to `free` due deliveries,
   * in one transaction. The outcomes go first, so the claim's count of live leases no longer
   * has the attempts that just ended: a slot frees when its answer arrives, not a turn later.
   * When the transaction fails the outcomes stay queued for the next turn (their write is
   * idempotent: it applies only on the attempt's own lease).
   */
  async function turn(free: number): Promise<{ claimed: Claimed[]; contended: boolean }> {
    const batch = ended.splice(0, OUTCOMES_PER_TURN);
    let result: { claimed: Claimed[]; contended: boolean };
    try {
      // Pipelined: BEGIN, the outcomes and COMMIT travel with the claim's statements, so a turn
      // waits on Postgres once per claim statement and once for the commit.
      result = await retried(() =>
        pipelinedTransaction(sql, async (tx, writes) => {
          writes.push(commitWithoutFlushWait(tx));
          if (batch.length > 0) {
            writes.push(
              writeOutcomes(
                tx,
                batch.map((b) => b.outcome),
              ),
            );
            // Delivered at commit, to every process listening (this one ignores its own).
            writes.push(tx`select pg_notify(${SLOTS_FREED_CHANNEL}, ${workerId})`.execute());
          }
          return free > 0 ? claimIn(tx, free, writes) : { claimed: [], contended: false };
        }),
      );
    } catch (err) {
      ended.unshift(...batch);
      throw err;
    }
    for (const b of batch) b.done();
    return result;
  }

  /** Writes what is still queued, for stop(); outcomes that cannot be written fail their attempts' promises. */
  async function flushEnded(): Promise<void> {
    for (let tries = 0; ended.length > 0 && tries < 3; tries++) await turn(0).catch(() => {});
    for (const b of ended.splice(0)) b.done(new Error("the outcome could not be written"));
  }

  function writeOutcomes(tx: Tx, outcomes: Outcome[]): Promise<unknown> {
    const column = <T>(f: (o: Outcome) => T) => outcomes.map(f);
    // Every expression on the right reads the row as it was: a delivery that was stopped while
    // its attempt ran keeps its `failed` status and stop reason, and only gains the attempt.
    // Rows are updated in id order, so two writers never wait on each other crosswise. The
    // attempt's row is added only when its delivery row still had the attempt's lease, so a
    // turn written again after a commit whose answer was lost adds nothing twice.
    return tx`
      with o as (
        select * from unnest(
          ${column((o) => o.c.id)}::text[], ${column((o) => o.c.lease_id)}::text[], ${column((o) => o.c.endpoint_id)}::text[],
          ${column((o) => (o.succeeded ? "t" : "f"))}::text[],
          ${column((o) => o.result.status || null)}::int[], ${column((o) => o.excerpt)}::text[],
          ${column((o) => o.result.durationMs)}::int[], ${column((o) => o.result.error || null)}::text[],
          ${column((o) => o.next)}::text[], ${column((o) => o.delayMs)}::int[])
          as o(id, lease_id, endpoint_id, succeeded, status, excerpt, duration_ms, error, next, delay_ms)),
      written as (
        update deliveries d set
          attempts = d.attempts + 1,
          response_status = o.status,
          response_body = o.excerpt,
          duration_ms = o.duration_ms,
          error = case when d.status = 'pending' then o.error else d.error end,
          status = case when d.status = 'pending' then o.next else d.status end,
          next_attempt_at = case when d.status = 'pending' and o.next = 'pending'
                                 then now() + make_interval(secs => o.delay_ms / 1000.0) else null end,
          lease_id = null,
          last_attempt_at = now(),
          updated_at = now()
        from (select * from o order by id) o
        where d.id = o.id and d.lease_id = o.lease_id
        returning d.id)
      insert into delivery_attempts (delivery_id, endpoint_id, succeeded, response_status, duration_ms, error)
      select o.id, o.endpoint_id, o.succeeded = 't', o.status, o.duration_ms, o.error
      from o join written w on w.id = o.id`.execute();
  }

  async function attempt(c: Claimed, answered: () => void): Promise<void> {
    const number = c.attempts + 1;
    const traced = options.tracing
      ? startSpan(
          options.tracing,
          `deliver ${c.event_type}`,
          SpanKind.CLIENT,
          { traceparent: c.traceparent, tracestate: "" },
          {
            "http.request.method": "POST",
            "event.type": c.event_type,
            "event.id": c.event_id,
            "webhook.delivery_id": c.id,
            "webhook.endpoint_id": c.endpoint_id,
            "webhook.attempt": number,
          },
        )
      : undefined;
    try {
      await attemptOnce(c, number, answered, (result, succeeded) => {
        if (!traced) return;
        if (result.status) traced.span.setAttribute("http.response.status_code", result.status);
        if (!succeeded) recordFailure(traced.span, result.error || String(result.status));
      });
    } catch (err) {
      if (traced) recordFailure(traced.span, "not_recorded");
      throw err;
    } finally {
      traced?.span.end();
    }
  }

  // The URL stays out of the span (its query may hold the receiver's token), and the request
  // carries no traceparent: internal trace ids are not the receiver's business.
  async function attemptOnce(
    c: Claimed,
    number: number,
    answered: () => void,
    onResult: (result: AttemptResult, succeeded: boolean) => void,
  ): Promise<void> {
    let result: AttemptResult;
    try {
      const t = Math.floor(Date.now() / 1000);
      const headers = {
        "content-type": "application/json",
        "user-agent": options.userAgent,
        "x-service-signature": signatureHeader(c.body, signingSecrets(options.secretKey, c), t),
        "x-service-event-type": c.event_type,
        "x-service-event-id": c.event_id,
        "x-service-delivery-id": c.id,
      };
      result = await sendOnce(new URL(c.url), c.body, headers, {
        timeoutMs: options.timeoutMs,
        allowPrivateNetworks: options.allowPrivateNetworks,
        userAgent: options.userAgent,
        ...(options.extraCa ? { extraCa: options.extraCa } : {}),
      });
    } catch (err) {
      // A secret that does not decrypt (wrong key) or a bug: recorded, retried, logged once here.
      log.error({ err, delivery_id: c.id }, "delivery attempt could not be made");
      result = { status: 0, bodyExcerpt: "", durationMs: 0, error: "internal" };
    }
    const succeeded = result.error === "" && result.status >= 200 && result.status < 300;
    if (!succeeded && result.error === "" && result.status >= 300 && result.status < 400) result.error = "redirect";
    onResult(result, succeeded);
    const delay = succeeded ? undefined : retryDelayMs(options.retryScheduleMs, number, result);
    const next = succeeded ? "succeeded" : delay === undefined ? "failed" : "pending";
    attemptsTotal.inc({ outcome: succeeded ? "succeeded" : "failed", error: result.error || "none" });
    attemptDuration.observe(result.durationMs / 1000);
    // Postgres text cannot hold NUL; a binary answer keeps the rest of its excerpt.
    const excerpt = result.bodyExcerpt.replaceAll("\u0000", "");
    const written = record({ c, result, succeeded, next, delayMs: delay ?? 0, excerpt });
    answered();
    await written;
    // One line per attempt, carrying the request id of the call that caused the event, so a
    // delivery can be traced back to the gateway's log line and forward from it.
    const fields = {
      request_id: c.request_id,
      event_id: c.event_id,
      delivery_id: c.id,
      endpoint_id: c.endpoint_id,
      attempt: number,
      status: result.status,
      error: result.error || undefined,
      ms: result.durationMs,
      next,
    };
    if (succeeded) log.info(fields, "delivery attempt succeeded");
    else log.warn(fields, "delivery attempt failed");
  }

  /** Sends one claimed attempt; its slot frees when the answer arrives (or the attempt fails). */
  function launch(c: Claimed): void {
    let free!: () => void;
    const slot = new Promise<void>((resolve) => (free = resolve));
    sending.add(slot);
    sendingTo.set(c.endpoint_id, (sendingTo.get(c.endpoint_id) ?? 0) + 1);
    const answered = () => {
      if (!sending.delete(slot)) return;
      const left = sendingTo.get(c.endpoint_id)! - 1;
      if (left === 0) sendingTo.delete(c.endpoint_id);
      else sendingTo.set(c.endpoint_id, left);
      free();
      wake();
    };
    const p: Promise<void> = attempt(c, answered)
      .catch((err: unknown) =>
        log.error({ err, delivery_id: c.id }, "recording a delivery attempt failed; the lease will run out and it is retried"),
      )
      .finally(() => {
        answered();
        inFlight.delete(p);
      });
    inFlight.add(p);
  }

  // Pause before looking again at destinations another process holds; doubles while they stay held.
  let contendedMs = 0;

  /** One turn, then what the loop does next: at once, after a short pause, or its idle poll. */
  async function iteration(): Promise<boolean | number> {
    const free = options.concurrency - sending.size;
    if (free <= 0 && ended.length === 0) {
      // Every slot is busy: wait for one to free. Not an idle sleep, which a wake noted while the
      // slots are full would end at once, making the loop spin on microtasks alone, starving the
      // process's timers and sockets until it runs out of memory.
      await Promise.race(sending);
      return true;
    }
    const { claimed, contended } = await turn(free);
    for (const c of claimed) launch(c);
    contendedMs = contended ? Math.min(Math.max(2 * contendedMs, contendedPause.firstMs), contendedPause.maxMs) : 0;
    // Fewer than asked: nothing more is due that this process may take. Wait for an answer (a
    // slot), for new events, or, when another process holds a destination, a short while.
    if (claimed.length < free) return contendedMs || false;
    return true;
  }

  const loop = backgroundLoop({
    name: "delivery worker",
    log,
    iteration,
    idleMs: pollMs,
    backoff: { firstMs: 400, maxMs: 2_000 },
    failureMessage: "cannot claim deliveries; retrying",
    // A turn may wait for a free slot, at most one attempt's timeout.
    stallWarnMs: options.timeoutMs + 60_000,
  });

  // Another process freed leases: worth a look now if the last turn found a destination held.
  let listening: Promise<{ unlisten(): Promise<void> } | undefined> = Promise.resolve(undefined);
  function listenForFreedSlots(): void {
    listening = sql
      .listen(SLOTS_FREED_CHANNEL, (from) => {
        if (from !== workerId && contendedMs > 0) wake();
      })
      .catch((err: unknown) => {
        // Without it the contended pause still bounds the wait; postgres.js re-listens after a reconnect.
        log.warn({ err: (err as Error).message }, "cannot listen for other processes' freed delivery slots; polling instead");
        return undefined;
      });
  }

  return {
    start() {
      listenForFreedSlots();
      loop.start();
    },
    wake,
    async stop() {
      await (await listening)?.unlisten().catch(() => {});
      await loop.stop();
      await Promise.allSettled([...sending]);
      await flushEnded();
      await Promise.allSettled([...inFlight]);
    },
  };
}
