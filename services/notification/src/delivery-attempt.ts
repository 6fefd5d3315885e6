// One delivery attempt: the signed request to the destination, what comes of its answer (done,
// failed, or due again after a gap), its metrics, its log line and its span.
import { metricsRegistry, recordFailure, SpanKind, startSpan, type Logger, type Tracing } from "@ledger/common";
import { Counter, Histogram } from "prom-client";
import type { Claimed } from "./delivery-claim.js";
import { signingSecrets } from "./endpoints.js";
import { sendOnce, type AttemptResult } from "./send.js";
import { signatureHeader } from "./webhook-signer.js";

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

/** How attempts are made. */
export interface AttemptOptions {
  log: Logger;
  secretKey: Buffer;
  timeoutMs: number;
  retryScheduleMs: number[];
  allowPrivateNetworks: boolean;
  extraCa?: string;
  userAgent: string;
  /** When set, each attempt is a span in the trace of the call that caused the event. */
  tracing?: Tracing | undefined;
}

/** What an ended attempt writes; many are written together. */
export interface Outcome {
  c: Claimed;
  result: AttemptResult;
  succeeded: boolean;
  next: "succeeded" | "failed" | "pending";
  delayMs: number;
  excerpt: string;
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
 * Makes the attempt of claimed delivery `c`: `answered` is called when its answer arrived (or it
 * failed), `record` queues its outcome and resolves once that is written; the attempt ends then.
 */
export async function attempt(
  options: AttemptOptions,
  c: Claimed,
  answered: () => void,
  record: (outcome: Outcome) => Promise<void>,
): Promise<void> {
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
    await attemptOnce(options, c, number, answered, record, (result, succeeded) => {
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
  options: AttemptOptions,
  c: Claimed,
  number: number,
  answered: () => void,
  record: (outcome: Outcome) => Promise<void>,
  onResult: (result: AttemptResult, succeeded: boolean) => void,
): Promise<void> {
  const { log } = options;
  const result = await send(options, c);
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

/** Sends the signed request once and answers what came of it; an attempt that could not be made is `internal`. */
async function send(options: AttemptOptions, c: Claimed): Promise<AttemptResult> {
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
    return await sendOnce(new URL(c.url), c.body, headers, {
      timeoutMs: options.timeoutMs,
      allowPrivateNetworks: options.allowPrivateNetworks,
      userAgent: options.userAgent,
      ...(options.extraCa ? { extraCa: options.extraCa } : {}),
    });
  } catch (err) {
    // A secret that does not decrypt (wrong key) or a bug: recorded, retried, logged once here.
    options.log.error({ err, delivery_id: c.id }, "delivery attempt could not be made");
    return { status: 0, bodyExcerpt: "", durationMs: 0, error: "internal" };
  }
}
