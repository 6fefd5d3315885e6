import { describe, expect, it } from "vitest";
import { apiKeyFromAuthorization } from "./auth.js";
import { createRateLimiter, rateKeyOf } from "./rate-limit.js";

describe("token bucket", () => {
  it("lets a burst through, then one request per refill, per key", async () => {
    const limiter = createRateLimiter({ perSecond: 10, burst: 3 });
    expect([1, 2, 3].map(() => limiter.take("a").ok)).toEqual([true, true, true]);
    const refused = limiter.take("a");
    expect(refused).toEqual({ ok: false, retryAfterSeconds: 1 });
    expect(limiter.take("b").ok).toBe(true);
    await new Promise((resolve) => setTimeout(resolve, 120));
    expect(limiter.take("a").ok).toBe(true);
  });
});

describe("the key a request is known by", () => {
  const KEY = "lsk_0123456789abcdefghij";
  // What Node hands over as the header value: it trims spaces and tabs around it, nothing else,
  // and reads other bytes as latin1 (0xa0 is the no-break space U+00A0).
  const spellings = [
    KEY,
    `Bearer ${KEY}`,
    `bearer ${KEY}`,
    `bEaReR ${KEY}`,
    `Bearer    ${KEY}`,
    `Bearer\t${KEY}`,
    `\u00a0Bearer ${KEY}`,
    `Bearer\u00a0${KEY}`,
    `${KEY}\u00a0`,
    `\u00a0${KEY}`,
  ];

  it("is the same API key however the header spells it", () => {
    for (const spelling of spellings) expect(apiKeyFromAuthorization(spelling), JSON.stringify(spelling)).toBe(KEY);
  });

  it("is not a key when what is left has spaces, controls or characters no key has", () => {
    for (const bad of [
      "",
      "   ",
      "Bearer",
      "Bearer ",
      "two words",
      `Bearer ${KEY} extra`,
      `${KEY}\u0000`,
      `l\u00e9sk_${KEY}`,
      "x".repeat(257),
    ]) {
      expect(apiKeyFromAuthorization(bad), JSON.stringify(bad)).toBeUndefined();
    }
    expect(apiKeyFromAuthorization(null)).toBeUndefined();
  });

  it("puts every spelling of a key in one bucket, and a header that is no key in its address's", () => {
    const buckets = new Set(spellings.map((spelling, i) => rateKeyOf(spelling, `10.0.0.${i}`)));
    expect(buckets.size).toBe(1);
    expect([...buckets][0]).not.toContain(KEY);
    expect(rateKeyOf("two words", "10.0.0.1")).toBe("ip:10.0.0.1");
    expect(rateKeyOf(undefined, "127.0.0.1")).toBe("ip:127.0.0.1");
    expect(rateKeyOf(undefined, undefined)).toBe("ip:unknown");
  });
});
