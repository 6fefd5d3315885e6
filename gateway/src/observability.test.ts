import { afterAll, beforeAll, expect, it } from "vitest";
import { startWebhookReceiver, type WebhookReceiver } from "@ledger/testing";
import { startStack, type Stack } from "@ledger/e2e";

// What operators read: metrics on every process, and one request id from the gateway's request
// to the event and its delivery attempt.

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

it("carries the caller's request id into the event, and every process exposes its metrics", async () => {
  const { api } = stack;
  expect((await api.post("/webhooks", { url: receiver.endpoint("/obs") })).status).toBe(200);
  const entity = (await api.post("/entity", { entity_name: "o", entity_type: "w" })).body.entity.entity_id;
  const requestId = `trace-${Date.now()}`;
  const res = await api.post(
    "/entity/fund",
    { entity_id: entity, amount: 3 },
    { "x-request-id": requestId, traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" },
  );
  expect(res.headers.get("x-request-id")).toBe(requestId);
  await expect.poll(() => receiver.received("/obs").length).toBe(1);
  const [row] =
    await stack.notificationSql!`select request_id from events where id = ${receiver.received("/obs")[0]!.headers["x-service-event-id"] as string}`;
  expect(row!["request_id"]).toBe(requestId);

  const metrics = async (url: string) => (await fetch(`${url}/metrics`)).text();
  const gateway = await metrics(stack.gateway.ops.url);
  expect(gateway).toMatch(/http_server_duration_seconds_count\{method="POST",route="\/entity\/fund",status="200"\} \d+/);
  const ledger = await metrics(stack.ledgerUrl);
  expect(ledger).toMatch(/rpc_server_duration_seconds_count\{service="LedgerService",method="FundEntity",code="ok"\}/);
  expect(ledger).toMatch(/outbox_backlog\{service="ledger"\} \d+/);
  expect(ledger).toMatch(/ledger_batch_commands_count \d+/);
  const notification = await metrics(stack.notification!.server.url);
  expect(notification).toMatch(/jetstream_consumer_pending \d+/);
  expect(notification).toMatch(/webhook_attempts_total\{outcome="succeeded",error="none"\} \d+/);
  const hold = await metrics(stack.hold!.server.url);
  expect(hold).toMatch(/hold_expiry_lag_seconds \d+/);
});

it("serves the gateway's metrics and readiness on its ops port only, and liveness on both", async () => {
  const publicUrl = stack.gateway.server.url;
  const opsUrl = stack.gateway.ops.url;
  expect(opsUrl).not.toBe(publicUrl);
  for (const path of ["/metrics", "/readyz"]) {
    const res = await fetch(`${publicUrl}${path}`);
    expect(res.status, `public ${path}`).toBe(404);
    expect(await res.json()).toMatchObject({ status: "error", error: { code: "not_found" } });
  }
  expect((await fetch(`${publicUrl}/healthz`)).status).toBe(200);
  expect(await (await fetch(`${opsUrl}/metrics`)).text()).toContain("http_server_duration_seconds");
  expect(await (await fetch(`${opsUrl}/readyz`)).json()).toEqual({ status: "ok", checks: { ledger: "ok", hold: "ok", public_port: "ok" } });
  expect((await fetch(`${opsUrl}/healthz`)).status).toBe(200);
  // The ops port is not an API: REST paths and the docs are not there.
  expect((await fetch(`${opsUrl}/v1/entity`)).status).toBe(404);
  expect((await fetch(`${opsUrl}/docs`)).status).toBe(404);
});
