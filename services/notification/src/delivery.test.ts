import Stripe from "stripe";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { startWebhookReceiver, type WebhookReceiver } from "@ledger/testing";
import { startStack, type Api, type Stack } from "@ledger/e2e";

// Deliveries end to end: ledger REST call -> outbox -> JetStream -> this service -> a real HTTPS
// receiver with a self-signed certificate. Signatures are checked with the Stripe SDK, an
// independent implementation of the same scheme.

const stripeSignature = new Stripe("sk_test_unused").webhooks.signature;
if (!stripeSignature) throw new Error("this stripe version has no webhooks.signature");
/** Stripe's verifier: true, or it throws. The API key is never used; verification is local. */
const verify = (body: string, header: string, secret: string) => stripeSignature.verifyHeader(body, header, secret);
let stack: Stack;
let api: Api;
let receiver: WebhookReceiver;

beforeAll(async () => {
  receiver = await startWebhookReceiver();
  stack = await startStack({ notification: { webhookExtraCa: receiver.ca, webhookTimeoutMs: 1_000, webhookRetryScheduleMs: [300, 300] } });
  api = stack.api;
});
afterAll(async () => {
  await stack?.close();
  await receiver?.close();
});

let paths = 0;
async function endpoint(reply?: Parameters<WebhookReceiver["endpoint"]>[1], extra: Record<string, unknown> = {}) {
  const path = `/hook-${++paths}`;
  const res = await api.post("/webhooks", { url: receiver.endpoint(path, reply), ...extra });
  expect(res.status).toBe(200);
  return { path, id: res.body.endpoint.endpoint_id as string, secret: res.body.endpoint.secret as string };
}

/** Funds a new entity: one `transaction.created` event. Returns its transaction group id. */
async function fund(amount = 1_000): Promise<string> {
  const entity = await api.post("/entity", { entity_name: "w", entity_type: "wallet" });
  const res = await api.post("/entity/fund", { entity_id: entity.body.entity.entity_id, amount });
  expect(res.status).toBe(200);
  return res.body.transaction.credit.transaction_group_id;
}

async function deliveriesOf(endpointId: string) {
  const res = await api.get("/webhooks/deliveries", { endpoint_id: endpointId, limit: "100" });
  expect(res.status).toBe(200);
  return res.body.deliveries as Array<Record<string, unknown>>;
}

async function settled(endpointId: string, count: number, timeoutMs = 15_000) {
  await vi.waitFor(
    async () => {
      const list = await deliveriesOf(endpointId);
      if (list.length < count || list.some((d) => d.status === "pending")) {
        throw new Error(`waiting for ${count} settled deliveries: ${JSON.stringify(list, null, 1)}`);
      }
    },
    { timeout: timeoutMs, interval: 100 },
  );
  return deliveriesOf(endpointId);
}

describe("signed deliveries", () => {
  it("delivers the documented body and headers, signed so the Stripe SDK verifies it", async () => {
    const ep = await endpoint();
    const group = await fund(2_500);
    const [delivery] = await settled(ep.id, 1);
    expect(delivery).toMatchObject({
      status: "succeeded",
      attempts: 1,
      response_status: 200,
      event_type: "transaction.created",
      error: null,
    });
    const [got] = receiver.received(ep.path);
    expect(got).toBeDefined();
    const body = JSON.parse(got!.body);
    expect(Object.keys(body)).toEqual(["id", "type", "created", "data"]);
    expect(body.id).toMatch(/^evt_/);
    expect(body.type).toBe("transaction.created");
    expect(Number.isInteger(body.created)).toBe(true);
    expect(Math.abs(body.created - Date.now() / 1000)).toBeLessThan(60);
    expect(body.data).toMatchObject({
      transaction_group_id: group,
      amount: 2_500,
      currency_code: "USD",
      status: "posted",
      disputed: false,
    });
    expect(body.data.legs).toHaveLength(2);
    expect(body.data.legs[0]).toEqual({
      transaction_id: expect.stringMatching(/^trx_/),
      entity_id: expect.stringMatching(/^ent_/),
      direction: "debit",
      amount: 2_500,
    });
    expect(got!.headers["content-type"]).toBe("application/json");
    expect(got!.headers["user-agent"]).toMatch(/^ledger-webhooks\//);
    expect(got!.headers["x-service-event-type"]).toBe("transaction.created");
    expect(got!.headers["x-service-event-id"]).toBe(body.id);
    expect(got!.headers["x-service-delivery-id"]).toBe(delivery!.delivery_id);
    const signature = got!.headers["x-service-signature"] as string;
    expect(signature).toMatch(/^t=\d+,v1=[0-9a-f]{64}$/);
    // t is the time of signing, in Unix seconds, so receivers can refuse old replays.
    expect(Math.abs(Number(signature.slice(2, signature.indexOf(","))) - got!.at / 1000)).toBeLessThan(5);
    expect(verify(got!.body, signature, ep.secret)).toBe(true);
    // One changed byte of the body, or another secret, and verification fails.
    expect(() => verify(got!.body.replace("2500", "2501"), signature, ep.secret)).toThrow();
    expect(() => verify(got!.body, signature, "whsec_not_the_secret")).toThrow();

    const event = await api.get("/event", { id: body.id });
    expect(event.status).toBe(200);
    expect(event.body.event).toMatchObject({ event_id: body.id, type: "transaction.created", data: body.data });
    expect(event.body.deliveries).toEqual([
      expect.objectContaining({ delivery_id: delivery!.delivery_id, status: "succeeded", attempts: 1, response_status: 200 }),
    ]);
  });

  it("signs with both secrets during a roll's overlap, and only the new one after it", async () => {
    const ep = await endpoint();
    const rolled = await api.post("/webhooks/roll", { endpoint_id: ep.id, expire_previous_in_seconds: 3600 });
    expect(rolled.status).toBe(200);
    expect(rolled.body.endpoint).toEqual({ endpoint_id: ep.id, secret: expect.stringMatching(/^whsec_/) });
    const second = rolled.body.endpoint.secret as string;
    expect(second).not.toBe(ep.secret);
    await fund();
    await settled(ep.id, 1);
    const during = receiver.received(ep.path)[0]!;
    const header = during.headers["x-service-signature"] as string;
    expect(header).toMatch(/^t=\d+,v1=[0-9a-f]{64},v1=[0-9a-f]{64}$/);
    expect(verify(during.body, header, ep.secret)).toBe(true);
    expect(verify(during.body, header, second)).toBe(true);

    const third = (await api.post("/webhooks/roll", { endpoint_id: ep.id, expire_previous_in_seconds: 0 })).body.endpoint.secret as string;
    await fund();
    await settled(ep.id, 2);
    const after = receiver.received(ep.path)[1]!;
    const afterHeader = after.headers["x-service-signature"] as string;
    expect(afterHeader).toMatch(/^t=\d+,v1=[0-9a-f]{64}$/);
    expect(verify(after.body, afterHeader, third)).toBe(true);
    expect(() => verify(after.body, afterHeader, second)).toThrow();
    expect(() => verify(after.body, afterHeader, ep.secret)).toThrow();
  });
});

describe("retries", () => {
  it("ends succeeded with 3 attempts when the receiver fails twice and then answers 200", async () => {
    const ep = await endpoint((n) => (n <= 2 ? { status: 500, body: `boom ${n}` } : { status: 204 }));
    await fund();
    const [delivery] = await settled(ep.id, 1);
    expect(delivery).toMatchObject({ status: "succeeded", attempts: 3, response_status: 204, error: null });
    const got = receiver.received(ep.path);
    expect(got).toHaveLength(3);
    // Every attempt sends the same body; each is signed afresh.
    expect(new Set(got.map((g) => g.body)).size).toBe(1);
    for (const g of got) expect(verify(g.body, g.headers["x-service-signature"] as string, ep.secret)).toBe(true);
    // The gaps follow the schedule (300 ms ± 10%), give or take the poll interval.
    expect(got[1]!.at - got[0]!.at).toBeGreaterThanOrEqual(250);
  });

  it("ends failed after the schedule when the receiver always fails, keeping its status and body", async () => {
    const ep = await endpoint(() => ({ status: 503, body: "x".repeat(5_000) }));
    await fund();
    const [delivery] = await settled(ep.id, 1);
    expect(delivery).toMatchObject({ status: "failed", attempts: 3, response_status: 503, next_attempt_at: null });
    expect(delivery!.response_body).toHaveLength(1024);
    expect(receiver.received(ep.path)).toHaveLength(3);
  });

  it("counts a receiver that never answers as a timeout", async () => {
    const ep = await endpoint(() => "hang");
    await fund();
    const [delivery] = await settled(ep.id, 1, 20_000);
    expect(delivery).toMatchObject({ status: "failed", attempts: 3, error: "timeout", response_status: null });
    expect(delivery!.duration_ms).toBeGreaterThanOrEqual(900);
  });

  it("treats a redirect as a failure and does not follow it", async () => {
    const target = `/redirect-target-${paths}`;
    const ep = await endpoint(() => ({ status: 302, headers: { location: receiver.endpoint(target) } }));
    await fund();
    const [delivery] = await settled(ep.id, 1);
    expect(delivery).toMatchObject({ status: "failed", response_status: 302, error: "redirect" });
    expect(receiver.received(target)).toHaveLength(0);
  });

  it("queues a fresh delivery on resend", async () => {
    const ep = await endpoint((n) => (n <= 3 ? { status: 400 } : { status: 200 }));
    await fund();
    const [first] = await settled(ep.id, 1);
    expect(first).toMatchObject({ status: "failed", response_status: 400 });
    const resent = await api.post("/webhooks/resend", { delivery_id: first!.delivery_id });
    expect(resent.status).toBe(200);
    expect(resent.body.delivery_id).toMatch(/^whd_/);
    expect(resent.body.delivery_id).not.toBe(first!.delivery_id);
    const list = await settled(ep.id, 2);
    const fresh = list.find((d) => d.delivery_id === resent.body.delivery_id);
    expect(fresh).toMatchObject({ status: "succeeded", event_id: first!.event_id });
  });
});

describe("which destinations receive an event", () => {
  it("filters by event_types, and a disabled destination gets nothing", async () => {
    const all = await endpoint(undefined);
    const onlyPosted = await endpoint(undefined, { event_types: ["transaction.posted"] });
    const onlyCreated = await endpoint(undefined, { event_types: ["transaction.created"] });
    const disabled = await endpoint(undefined);
    expect((await api.put("/webhooks", { endpoint_id: disabled.id, enabled: false })).body.endpoint).toMatchObject({
      endpoint_id: disabled.id,
      enabled: false,
    });

    const a = (await api.post("/entity", { entity_name: "a", entity_type: "w" })).body.entity.entity_id;
    const b = (await api.post("/entity", { entity_name: "b", entity_type: "w" })).body.entity.entity_id;
    await api.post("/entity/fund", { entity_id: a, amount: 100 });
    const pending = await api.post("/transaction", { description: "pending", amount: 10, account: { from: a, to: b } });
    expect(pending.status).toBe(200);
    expect((await api.post("/transaction/post", { transaction_group_id: pending.body.transaction_group_id })).status).toBe(200);

    // all: created (fund), created (pending), posted.
    await settled(all.id, 3);
    await settled(onlyCreated.id, 2);
    await settled(onlyPosted.id, 1);
    const types = (path: string) =>
      receiver
        .received(path)
        .map((r) => JSON.parse(r.body).type)
        .sort();
    expect(types(all.path)).toEqual(["transaction.created", "transaction.created", "transaction.posted"]);
    expect(types(onlyCreated.path)).toEqual(["transaction.created", "transaction.created"]);
    expect(types(onlyPosted.path)).toEqual(["transaction.posted"]);
    const posted = JSON.parse(receiver.received(onlyPosted.path)[0]!.body);
    expect(posted.data).toMatchObject({
      transaction_group_id: pending.body.transaction_group_id,
      amount: 10,
      currency_code: "USD",
      status: "posted",
    });
    expect(receiver.received(disabled.path)).toHaveLength(0);
    expect(await deliveriesOf(disabled.id)).toEqual([]);

    // Re-enabling does not replay what was missed.
    await api.put("/webhooks", { endpoint_id: disabled.id, enabled: true });
    await new Promise((r) => setTimeout(r, 500));
    expect(await deliveriesOf(disabled.id)).toEqual([]);
  });
});
