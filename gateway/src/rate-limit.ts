import { createHash } from "node:crypto";

/** The answer of a rate limiter: go ahead, or come back in `retryAfterSeconds`. */
export type RateDecision = { ok: true } | { ok: false; retryAfterSeconds: number };

/** Per-key request budgets. */
export interface RateLimiter {
  take(key: string): RateDecision;
}

/**
 * A token bucket per key: `perSecond` requests a second on average, bursts up to `burst`.
 * Buckets live in memory, per gateway replica (so the effective limit scales with replicas);
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

/**
 * The key a request is limited by: its API key (hashed, so no key sits in memory as text), or its
 * address when it sends none.
 */
export function rateKeyOf(authorization: string | undefined, remoteAddress: string | undefined): string {
  if (authorization) return "key:" + createHash("sha256").update(authorization.replace(/^bearer\s+/i, "").trim()).digest("base64url").slice(0, 22);
  return "ip:" + (remoteAddress ?? "unknown");
}
