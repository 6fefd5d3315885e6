import { afterAll, beforeAll, expect, it } from "vitest";
import { startWebhookReceiver, type WebhookReceiver } from "@ledger/testing";
import { startStack, type Stack } from "@ledger/e2e";

// When every delivery slot is busy, the worker must wait for a slot to free, not spin: a wake
// noted while the slots were full once made its wait return at once, so the loop ran on
// microtasks alone, starved every timer and socket of the process and grew until it ran out of
// memory. The stack runs in this process, so a starved event loop shows as a late timer here.

let stack: Stack;
let receiver: WebhookReceiver;

beforeAll(async () => {
  receiver = await startWebhookReceiver();
  stack = await startStack({ notification: { webhookExtraCa: receiver.ca, webhookConcurrency: 1 } });
});
afterAll(async () => {
  await stack?.close();
  await receiver?.close();
});

it("keeps the process responsive while every slot waits on a slow destination", async () => {
  const url = receiver.endpoint("/slow", () => ({ status: 200, delayMs: 1_500 }));
  expect((await stack.api.post("/webhooks", { url })).status).toBe(200);
  const entity = (await stack.api.post("/entity", { entity_name: "slow", entity_type: "wallet" })).body.entity.entity_id;
  // Several events: the first fills the only slot, the others wake the worker while it is full.
  for (let i = 0; i < 3; i++) expect((await stack.api.post("/entity/fund", { entity_id: entity, amount: 1 })).status).toBe(200);
  await expect.poll(() => receiver.received("/slow").length, { timeout: 10_000 }).toBeGreaterThan(0);

  // While the slot is busy, a 20 ms timer must fire about on time.
  const lateness: number[] = [];
  for (let i = 0; i < 10; i++) {
    const asked = performance.now();
    await new Promise((resolve) => setTimeout(resolve, 20));
    lateness.push(performance.now() - asked - 20);
  }
  expect(Math.max(...lateness)).toBeLessThan(500);
  await expect.poll(() => receiver.received("/slow").length, { timeout: 15_000 }).toBeGreaterThanOrEqual(3);
});
