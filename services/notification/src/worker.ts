import { randomUUID } from "node:crypto";
import type { Logger, Sql, Tracing } from "@ledger/common";
import { metricsRegistry, recordFailure, SpanKind, startSpan, wakeableSleep } from "@ledger/common";
import { Counter, Histogram } from "prom-client";
import { signingSecrets } from "./endpoints.js";
import { signatureHeader } from "./secrets.js";
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
  concurrency: number;
  concurrencyPerEndpoint: number;
  allowPrivateNetworks: boolean;
  extraCa?: string;
  userAgent: string;
  /** How often to look for due work when nothing woke the loop. */
  pollMs?: number;
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

/** The next gap after failed attempt number `attempt` (1-based), or undefined when none is left. */
export function retryDelayMs(schedule: number[], attempt: number, result: AttemptResult, random = Math.random): number | undefined {
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
 * Creates the workers. A due delivery is claimed in a short transaction with SKIP LOCKED, which
 * sets a lease (lease_id, and next_attempt_at pushed past the attempt's timeout) before the
 * transaction commits: another process then sees it as not due, so no attempt is sent twice,
 * and a process that dies mid-attempt only leaves a lease that runs out and is retried.
 */
export function createWorker(options: WorkerOptions): Worker {
  const { sql, log } = options;
  const pollMs = options.pollMs ?? 250;
  const leaseMs = options.timeoutMs + 30_000;
  let running = false;
  let loop: Promise<void> | undefined;
  const inFlight = new Set<Promise<void>>();

  const { sleep, wake } = wakeableSleep();

  async function claim(limit: number): Promise<Claimed[]> {
    const lease = randomUUID();
    const cap = options.concurrencyPerEndpoint;
    return sql.begin(async (tx): Promise<Claimed[]> => {
      // Due deliveries, at most `cap` per destination, so a destination with a large backlog
      // cannot fill the batch and hold back the others.
      const due = await tx<{ id: string; endpoint_id: string; enabled: boolean; deleted: boolean }[]>`
        select d.id, d.endpoint_id, en.enabled, en.deleted_at is not null as deleted
        from (select distinct endpoint_id from deliveries
              where status = 'pending' and next_attempt_at <= now() limit 1000) due_endpoints
        join endpoints en on en.id = due_endpoints.endpoint_id
        -- Per destination, its oldest due deliveries through the (endpoint_id, next_attempt_at)
        -- index: each claim reads a few rows per destination, not the whole backlog. The due
        -- conditions stand on the locked rows themselves, so a row another process leased
        -- after this statement's snapshot is re-read by the lock and dropped, never sent twice.
        cross join lateral (
          select id, endpoint_id, next_attempt_at from deliveries d
          where d.endpoint_id = en.id and d.status = 'pending' and d.next_attempt_at <= now()
          order by d.next_attempt_at, d.id
          limit ${cap}
          for update skip locked) d
        order by d.next_attempt_at, d.id
        limit ${limit * 2}`;
      if (due.length === 0) return [] as Claimed[];
      // A destination switched off while this was queued: the retry stops here (DESIGN.md 6).
      const stopped = due.filter((d) => !d.enabled || d.deleted);
      for (const d of stopped) {
        await tx`
          update deliveries set status = 'failed', error = ${d.deleted ? "endpoint_deleted" : "endpoint_disabled"},
            next_attempt_at = null, updated_at = now()
          where id = ${d.id}`;
      }
      const live = due.filter((d) => d.enabled && !d.deleted);
      if (live.length === 0) return [] as Claimed[];
      const endpointIds = [...new Set(live.map((d) => d.endpoint_id))];
      const busy = await tx<{ endpoint_id: string; n: number }[]>`
        select endpoint_id, count(*)::int as n from deliveries
        where status = 'pending' and lease_id is not null and next_attempt_at > now() and endpoint_id in ${tx(endpointIds)}
        group by endpoint_id`;
      const used = new Map(busy.map((b) => [b.endpoint_id, b.n]));
      const chosen: string[] = [];
      for (const d of live) {
        if (chosen.length >= limit) break;
        const n = used.get(d.endpoint_id) ?? 0;
        if (n >= cap) continue;
        used.set(d.endpoint_id, n + 1);
        chosen.push(d.id);
      }
      if (chosen.length === 0) return [] as Claimed[];
      return tx<Claimed[]>`
        with leased as (
          update deliveries set lease_id = ${lease}, next_attempt_at = now() + make_interval(secs => ${leaseMs / 1000}), updated_at = now()
          where id in ${tx(chosen)}
          returning id, endpoint_id, event_id, attempts)
        select l.id, l.endpoint_id, l.event_id, ev.type as event_type, ev.request_id, ev.traceparent, en.url, ev.body, l.attempts,
               en.secret, en.previous_secret,
               coalesce(en.previous_secret_expires_at > now(), false) as previous_active,
               ${lease} as lease_id
        from leased l join endpoints en on en.id = l.endpoint_id join events ev on ev.id = l.event_id`;
    });
  }

  async function attempt(c: Claimed): Promise<void> {
    const number = c.attempts + 1;
    const traced = options.tracing
      ? startSpan(options.tracing, `deliver ${c.event_type}`, SpanKind.CLIENT, { traceparent: c.traceparent, tracestate: "" }, {
          "http.request.method": "POST",
          "event.type": c.event_type,
          "event.id": c.event_id,
          "webhook.delivery_id": c.id,
          "webhook.endpoint_id": c.endpoint_id,
          "webhook.attempt": number,
        })
      : undefined;
    try {
      await attemptOnce(c, number, (result, succeeded) => {
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
  async function attemptOnce(c: Claimed, number: number, onResult: (result: AttemptResult, succeeded: boolean) => void): Promise<void> {
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
    const excerpt = result.bodyExcerpt.replace(/\u0000/g, "");
    await sql.begin(async (tx) => {
      // Every expression on the right reads the row as it was: a delivery that was stopped while
      // this attempt ran keeps its `failed` status and stop reason, and only gains the attempt.
      await tx`
        update deliveries set
          attempts = attempts + 1,
          response_status = ${result.status || null},
          response_body = ${excerpt},
          duration_ms = ${result.durationMs},
          error = case when status = 'pending' then ${result.error || null} else error end,
          status = case when status = 'pending' then ${next} else status end,
          next_attempt_at = case when status = 'pending' and ${next} = 'pending'
                                 then now() + make_interval(secs => ${(delay ?? 0) / 1000}) else null end,
          lease_id = null,
          last_attempt_at = now(),
          updated_at = now()
        where id = ${c.id} and lease_id = ${c.lease_id}`;
      await tx`
        insert into delivery_attempts (delivery_id, endpoint_id, succeeded, response_status, duration_ms, error)
        values (${c.id}, ${c.endpoint_id}, ${succeeded}, ${result.status || null}, ${result.durationMs}, ${result.error || null})`;
    });
    // One line per attempt, carrying the request id of the call that caused the event, so a
    // delivery can be traced back to the gateway's log line and forward from it.
    const fields = { request_id: c.request_id, event_id: c.event_id, delivery_id: c.id, endpoint_id: c.endpoint_id, attempt: number, status: result.status, error: result.error || undefined, ms: result.durationMs, next };
    if (succeeded) log.info(fields, "delivery attempt succeeded");
    else log.warn(fields, "delivery attempt failed");
  }

  async function run() {
    let failures = 0;
    while (running) {
      const free = options.concurrency - inFlight.size;
      if (free <= 0) {
        await Promise.race([...inFlight, sleep(pollMs)]);
        continue;
      }
      let claimed: Claimed[] = [];
      try {
        claimed = await claim(free);
        failures = 0;
      } catch (err) {
        failures++;
        if (failures === 1 || failures % 30 === 0) log.warn({ err: (err as Error).message, failures }, "cannot claim deliveries; retrying");
      }
      for (const c of claimed) {
        const p: Promise<void> = attempt(c)
          .catch((err: unknown) => log.error({ err, delivery_id: c.id }, "recording a delivery attempt failed; the lease will run out and it is retried"))
          .finally(() => {
            inFlight.delete(p);
            wake();
          });
        inFlight.add(p);
      }
      if (claimed.length === 0) await sleep(failures > 0 ? Math.min(200 * 2 ** Math.min(failures, 4), 2_000) : pollMs);
    }
  }

  return {
    start() {
      if (running) return;
      running = true;
      loop = run();
    },
    wake,
    async stop() {
      running = false;
      wake();
      await loop;
      await Promise.allSettled([...inFlight]);
    },
  };
}
