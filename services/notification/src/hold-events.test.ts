import Stripe from "stripe";
import { verifyWebhook } from "@ledger/webhooks";
import { afterAll, beforeAll, expect, it } from "vitest";
import { startWebhookReceiver, type WebhookReceiver } from "@ledger/testing";
import { startStack, type Stack } from "@ledger/e2e";

// Hold events take the same path as the ledger's: the hold service's outbox -> JetStream -> this
// service -> a signed HTTPS delivery to a destination subscribed to hold events only.

const signature = new Stripe("sk_test_unused").webhooks.signature!;
let stack: Stack;
let receiver: WebhookReceiver;

beforeAll(async () => {
  receiver = await startWebhookReceiver();
  stack = await startStack({ notification: { webhookExtraCa: receiver.ca } });
});
afterAll(async () => {
  await stack?.close();
  await receiver?.close();
});

it("delivers hold.created, hold.captured and hold.released, signed, with the hold as data", async () => {
  const { api } = stack;
  const created = await api.post("/webhooks", {
    url: receiver.endpoint("/holds"),
    event_types: ["hold.created", "hold.captured", "hold.released"],
  });
  expect(created.status).toBe(200);
  const secret = created.body.endpoint.secret as string;

  const source = (await api.post("/entity", { entity_name: "s", entity_type: "w" })).body.entity.entity_id;
  const dest = (await api.post("/entity", { entity_name: "d", entity_type: "w" })).body.entity.entity_id;
  await api.post("/entity/fund", { entity_id: source, amount: 500 });
  const hold = (await api.post("/hold", { entity_id: source, amount: 300, description: "auth" })).body.hold;
  const capture = await api.post("/hold/capture", { hold_id: hold.hold_id, amount: 120, destination_entity_id: dest });
  expect(capture.status).toBe(200);
  expect((await api.post("/hold/release", { hold_id: hold.hold_id })).status).toBe(200);

  await expect.poll(() => receiver.received("/holds").length).toBeGreaterThanOrEqual(3);
  const got = receiver.received("/holds");
  // Only hold events: the fund and the capture's transfer (transaction.created) are filtered out.
  expect(got.map((g) => JSON.parse(g.body).type).sort()).toEqual(["hold.captured", "hold.created", "hold.released"]);
  for (const g of got) {
    expect(signature.verifyHeader(g.body, g.headers["x-service-signature"] as string, secret)).toBe(true);
    // The receiver-side helper this project ships agrees, and refuses the same body with another secret.
    expect(verifyWebhook(g.body, g.headers["x-service-signature"] as string, [secret])).toMatchObject({
      id: g.headers["x-service-event-id"],
    });
    expect(() => verifyWebhook(g.body, g.headers["x-service-signature"] as string, ["whsec_other"])).toThrow(/no signature matches/);
  }

  const byType = Object.fromEntries(got.map((g) => [JSON.parse(g.body).type, JSON.parse(g.body).data]));
  expect(byType["hold.created"]).toMatchObject({
    hold_id: hold.hold_id,
    entity_id: source,
    amount: 300,
    captured_amount: 0,
    status: "held",
    currency_code: "USD",
    description: "auth",
  });
  expect(byType["hold.captured"]).toMatchObject({
    hold_id: hold.hold_id,
    captured_amount: 120,
    status: "partially_captured",
    captured: { amount: 120, destination_entity_id: dest, transaction_group_id: capture.body.transaction.transaction_group_id },
  });
  expect(byType["hold.released"]).toMatchObject({
    hold_id: hold.hold_id,
    status: "released",
    release_reason: "requested",
    captured_amount: 120,
  });

  // The event log has them too, each with its one succeeded delivery (recorded just after the
  // receiver answered, so it may take a moment).
  await expect
    .poll(async () => {
      const events = await api.get("/events", { limit: "100" });
      const holdEvents = events.body.events.filter((e: { type: string }) => e.type.startsWith("hold."));
      return holdEvents.map((e: { deliveries: { total: number; succeeded: number } }) => [e.deliveries.total, e.deliveries.succeeded]);
    })
    .toEqual([
      [1, 1],
      [1, 1],
      [1, 1],
    ]);
});
