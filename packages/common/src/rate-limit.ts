import { createHash } from "node:crypto";
import { Code, type ConnectError, type Interceptor } from "@connectrpc/connect";
import type { RateLimitConfig } from "./config.js";
import { appError } from "./errors.js";
import { apiKeyFromAuthorization, isServiceCall } from "./auth.js";
import { peerAddressOf } from "./server.js";

/** The answer of a rate limiter: go ahead, or come back in `retryAfterSeconds`. */
export type RateDecision = { ok: true } | { ok: false; retryAfterSeconds: number };

/** Per-key request budgets. */
export interface RateLimiter {
  take(key: string): RateDecision;
}

/**
 * A token bucket per key: `perSecond` requests a second on average, bursts up to `burst`.
 * Buckets live in memory, per process (so the effective limit scales with replicas);
 * the least recently used are forgotten past `maxKeys`, which only ever gives a key a full bucket.
 */
export function createRateLimiter(options: { perSecond: number; burst: number; maxKeys?: number }): RateLimiter {
  const maxKeys = options.maxKeys ?? 100_000;
  const buckets = new Map<string, { tokens: number; at: number }>();
  return {
    take(key) {
      const now = performance.now();
      const bucket = buckets.get(key) ?? { tokens: options.burst, at: now };
      buckets.delete(key);
      bucket.tokens = Math.min(options.burst, bucket.tokens + ((now - bucket.at) * options.perSecond) / 1000);
      bucket.at = now;
      buckets.set(key, bucket);
      if (buckets.size > maxKeys) buckets.delete(buckets.keys().next().value!);
      if (bucket.tokens >= 1) {
        bucket.tokens -= 1;
        return { ok: true };
      }
      return { ok: false, retryAfterSeconds: Math.max(1, Math.ceil((1 - bucket.tokens) / options.perSecond)) };
    },
  };
}

/** A limiter of the configured budgets, or undefined when they are off (a rate of 0). */
export function rateLimiterOf(config: RateLimitConfig): RateLimiter | undefined {
  return config.rateLimitPerSecond > 0
    ? createRateLimiter({ perSecond: config.rateLimitPerSecond, burst: config.rateLimitBurst })
    : undefined;
}

/**
 * The bucket a request is counted in: its API key as `apiKeyFromAuthorization` reads it, so
 * every spelling of one key (`Bearer`, any case, extra or no-break spaces) is one bucket, hashed
 * so no key sits in memory as text; or its address, when it sends no header that can be a key.
 */
export function rateKeyOf(authorization: string | null | undefined, remoteAddress: string | undefined): string {
  const apiKey = apiKeyFromAuthorization(authorization ?? null);
  if (apiKey) return "key:" + createHash("sha256").update(apiKey).digest("base64url").slice(0, 22);
  return "ip:" + (remoteAddress ?? "unknown");
}

/** The refusal of a caller over the budget of `rateKey` (from `rateKeyOf`); REST answers it 429 with Retry-After. */
export function rateLimited(rateKey: string, retryAfterSeconds: number): ConnectError {
  const who = rateKey.startsWith("key:") ? "this API key" : "this address";
  const err = appError(Code.ResourceExhausted, "rate_limited", `too many requests for ${who}; retry in ${retryAfterSeconds} s`, {
    retry_after_seconds: retryAfterSeconds,
  });
  err.metadata.set("retry-after", String(retryAfterSeconds));
  return err;
}

/**
 * The gateway's budgets on an RPC port: each call takes a token from its API key's bucket (its
 * address's without one) before authentication, so a flood costs no key look-ups. The
 * installation's own services, calling with `Service <token>`, are not limited.
 */
export function rateLimitInterceptor(config: RateLimitConfig & { serviceToken?: string }): Interceptor {
  const limiter = rateLimiterOf(config);
  if (!limiter) return (next) => next;
  return (next) => async (req) => {
    const authorization = req.header.get("authorization");
    if (config.serviceToken !== undefined && isServiceCall(authorization, config.serviceToken)) return next(req);
    const rateKey = rateKeyOf(authorization, peerAddressOf(req.contextValues));
    const decision = limiter.take(rateKey);
    if (!decision.ok) throw rateLimited(rateKey, decision.retryAfterSeconds);
    return next(req);
  };
}
