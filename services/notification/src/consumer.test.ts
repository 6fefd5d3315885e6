import { afterAll, describe, expect, it } from "vitest";
import { NATS_SERVER_BIN, ownNats, startWebhookReceiver, type OwnNats, type WebhookReceiver } from "@ledger/testing";
import { startStack, type Stack } from "@ledger/e2e";

// The consumer starts without NATS and catches up once it is there; a redelivered event is
// stored once. This test runs a nats-server of its own so that it can start it late.

describe.runIf(NATS_SERVER_BIN)("event consumer", () => {
  let nats: OwnNats | undefined;
  let stack: Stack | undefined;
  let receiver: WebhookReceiver | undefined;

  afterAll(async () => {
    await stack?.close();
    await receiver?.close();
    await nats?.dispose();
  });

  it("starts while NATS is down and delivers every event, once, after NATS comes up", async () => {
    nats = await ownNats();
    receiver = await startWebhookReceiver();
    stack = await startStack({ natsUrl: nats.url, notification: { webhookExtraCa: receiver.ca } });
    const { api } = stack;
    const ready = await fetch(`${stack.notification!.server.url}/readyz`);
    expect(ready.status).toBe(503);
    const ep = await api.post("/webhooks", { url: receiver.endpoint("/late") });
    expect(ep.status).toBe(200);
    const entity = await api.post("/entity", { entity_name: "w", entity_type: "wallet" });
    for (let i = 0; i < 3; i++)
      expect((await api.post("/entity/fund", { entity_id: entity.body.entity.entity_id, amount: 10 + i })).status).toBe(200);

    await nats.start();
    await expect.poll(() => receiver!.received("/late").length, { timeout: 30_000 }).toBe(3);
    const events = (await api.get("/events")).body.events;
    expect(events).toHaveLength(3);
    const amounts = receiver
      .received("/late")
      .map((r) => JSON.parse(r.body).data.amount)
      .sort();
    expect(amounts).toEqual([10, 11, 12]);
    await new Promise((r) => setTimeout(r, 500));
    expect(receiver.received("/late")).toHaveLength(3);
  });
});
