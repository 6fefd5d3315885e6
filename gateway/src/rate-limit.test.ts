import * as http from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startStack, type Stack } from "@ledger/e2e";

describe("through the gateway", () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack({ gateway: { rateLimitPerSecond: 2, rateLimitBurst: 5 } });
  });
  afterAll(async () => stack?.close());

  it("answers 429 with Retry-After and the envelope once a key's budget is spent, and changes nothing", async () => {
    const entity = (await stack.api.post("/entity", { entity_name: "w", entity_type: "w" })).body.entity.entity_id;
    // 20 at once against a burst of 5 and 2 a second: at least 3 are refused unless the 20 take
    // over 6 s, so a loaded machine cannot refill the budget in time to pass them all.
    const results = await Promise.all(Array.from({ length: 20 }, () => stack.api.post("/entity/fund", { entity_id: entity, amount: 1 })));
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

describe("one key, however it is spelled", () => {
  let stack: Stack;
  beforeAll(async () => {
    // Almost no refill: the test's requests all fall within one burst.
    stack = await startStack({ gateway: { rateLimitPerSecond: 0.01, rateLimitBurst: 2 } });
  });
  afterAll(async () => stack?.close());

  /** GET /v1/programs with this Authorization, written as given (http.request sends 0xa0 as is; fetch would refuse it). */
  const statusWith = (authorization: string) =>
    new Promise<number>((resolve, reject) => {
      const { hostname, port } = new URL(stack.restUrl);
      http
        .get({ host: hostname, port, path: "/v1/programs", agent: false, headers: { authorization } }, (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        })
        .on("error", reject);
    });

  it("counts every spelling of a key against that key's budget", async () => {
    const key = stack.account.api_key;
    expect([await statusWith(key), await statusWith(`Bearer ${key}`)]).toEqual([200, 200]);
    for (const spelling of [
      `bEaReR ${key}`,
      `Bearer    ${key}`,
      `\u00a0Bearer ${key}`,
      `Bearer\u00a0${key}`,
      `\u00a0${key}\u00a0`,
      `  ${key}\t`,
    ]) {
      expect(await statusWith(spelling), JSON.stringify(spelling)).toBe(429);
    }
    // Another key still has its own budget.
    const { account } = await stack.newAccount("other");
    expect(await statusWith(`\u00a0Bearer ${account.api_key}`)).toBe(200);
  });
});
