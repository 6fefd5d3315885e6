import { expect, it } from "vitest";
import { AUTH_CACHE_TTL_MS, cachedAuthenticator, type Principal } from "./auth.js";

// The key cache every service puts in front of its look-ups: its TTL is the bound on how long a
// revoked key keeps working (docs/operations.md#api-keys), and a burst of requests costs one look-up.

const principal: Principal = { accountId: "acct_1", defaultProgramId: "prg_1", apiKeyId: "key_1" };

it("keeps answers under 5 seconds and shares one look-up between concurrent misses", async () => {
  expect(AUTH_CACHE_TTL_MS).toBeLessThanOrEqual(2_000);
  let lookUps = 0;
  const auth = cachedAuthenticator(async () => {
    lookUps++;
    await new Promise((resolve) => setTimeout(resolve, 20));
    return principal;
  }, 200);
  const answers = await Promise.all(Array.from({ length: 50 }, () => auth("lsk_x")));
  expect(answers.every((a) => a === principal)).toBe(true);
  expect(lookUps).toBe(1);
  await auth("lsk_x");
  expect(lookUps).toBe(1);
  // Past the TTL (counted from when the look-up began), the key is looked up again.
  await new Promise((resolve) => setTimeout(resolve, 220));
  await auth("lsk_x");
  expect(lookUps).toBe(2);
});

it("does not keep a failed look-up: the next request asks again", async () => {
  let calls = 0;
  const auth = cachedAuthenticator(async () => {
    if (++calls === 1) throw new Error("ledger unreachable");
    return principal;
  });
  await expect(auth("lsk_y")).rejects.toThrow("ledger unreachable");
  expect(await auth("lsk_y")).toBe(principal);
});
