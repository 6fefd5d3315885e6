import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startStack, type Stack } from "@ledger/testing";
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

  it("keys by API key with or without Bearer, and by address without one", () => {
    expect(rateKeyOf("Bearer lsk_x", "1.2.3.4")).toBe(rateKeyOf("lsk_x", "5.6.7.8"));
    expect(rateKeyOf("lsk_x", undefined)).not.toContain("lsk_x");
    expect(rateKeyOf(undefined, "127.0.0.1")).toBe("ip:127.0.0.1");
  });
});

describe("through the gateway", () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack({ gateway: { rateLimitPerSecond: 2, rateLimitBurst: 5 } });
  });
  afterAll(async () => stack?.close());

  it("answers 429 with Retry-After and the envelope once a key's budget is spent, and changes nothing", async () => {
    const entity = (await stack.api.post("/entity", { entity_name: "w", entity_type: "w" })).body.entity.entity_id;
    const results = await Promise.all(Array.from({ length: 8 }, () => stack.api.post("/entity/fund", { entity_id: entity, amount: 1 })));
    const limited = results.filter((r) => r.status === 429);
    const funded = results.filter((r) => r.status === 200).length;
    expect(limited.length).toBeGreaterThanOrEqual(3);
    for (const r of limited) {
      expect(r.headers.get("retry-after")).toMatch(/^\d+$/);
      expect(r.body).toMatchObject({ status: "error", error: { code: "rate_limited" } });
    }
    // Another key has its own budget.
    const { api: other } = await stack.newAccount("other");
    expect((await other.get("/programs")).status).toBe(200);
    // The refused deposits moved nothing.
    await new Promise((resolve) => setTimeout(resolve, 1_100));
    const balance = await stack.api.get("/entity", { entity_id: entity });
    expect(balance.status).toBe(200);
    expect(balance.body.entity.balances.posted).toBe(funded);
  });
});
