import { jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { afterAll, describe, expect, it } from "vitest";
import { NATS_SERVER_BIN, ownNats, startWebhookReceiver, type OwnNats, type WebhookReceiver } from "@ledger/testing";
import { startStack, type Stack } from "@ledger/e2e";
import { consumerName, MAX_ACK_PENDING } from "./consumer.js";

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

// How many events may be out unacknowledged bounds what a process holds while it drains a
// backlog, so a durable consumer left with another limit by an earlier version gets this one.
describe("the durable consumer's limit of unacknowledged events", () => {
  let stack: Stack | undefined;
  afterAll(async () => {
    await stack?.close();
  });

  it("is set when the consumer is made, and reset when an earlier version left another", async () => {
    stack = await startStack({ notification: {} });
    const nc = await connect({ servers: stack.natsUrl });
    try {
      const jsm = await jetstreamManager(nc);
      const name = consumerName(stack.stream);
      const limit = async () => (await jsm.consumers.info(stack!.stream, name).catch(() => undefined))?.config.max_ack_pending;
      await expect.poll(limit, { timeout: 10_000 }).toBe(MAX_ACK_PENDING);

      await jsm.consumers.update(stack.stream, name, { max_ack_pending: 4 * MAX_ACK_PENDING });
      expect(await limit()).toBe(4 * MAX_ACK_PENDING);
      await stack.startNotificationReplica();
      await expect.poll(limit, { timeout: 10_000 }).toBe(MAX_ACK_PENDING);
    } finally {
      await nc.close();
    }
  });
});
