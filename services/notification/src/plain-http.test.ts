import { createServer, type Server } from "node:http";
import { afterAll, beforeAll, expect, it } from "vitest";
import { startStack, type Stack } from "@ledger/e2e";

// WEBHOOK_ALLOW_HTTP=true (development only) lets a destination use plain http://, and a disabled
// destination refuses a resend instead of queueing a delivery that would only end `failed`.

let stack: Stack;
let server: Server;
let origin: string;
const bodies: string[] = [];

beforeAll(async () => {
  server = createServer((req, res) => {
    let body = "";
    req.on("data", (chunk: Buffer) => (body += chunk.toString("utf8")));
    req.on("end", () => {
      bodies.push(body);
      res.writeHead(200).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  origin = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  stack = await startStack({ notification: { webhookAllowHttp: true } });
});
afterAll(async () => {
  await stack?.close();
  await new Promise((resolve) => server?.close(resolve));
});

it("delivers to http:// when WEBHOOK_ALLOW_HTTP is on, and refuses a resend to a disabled destination", async () => {
  const { api } = stack;
  const created = await api.post("/webhooks", { url: `${origin}/plain` });
  expect(created.status).toBe(200);
  const endpointId = created.body.endpoint.endpoint_id as string;
  const entity = (await api.post("/entity", { entity_name: "w", entity_type: "w" })).body.entity.entity_id;
  await api.post("/entity/fund", { entity_id: entity, amount: 10 });
  await expect.poll(() => bodies.length).toBe(1);
  expect(JSON.parse(bodies[0]!)).toMatchObject({ type: "transaction.created", data: { amount: 10 } });

  // The destination has the body before the worker records its answer, so the status is polled.
  const listDeliveries = () => api.get("/webhooks/deliveries", { endpoint_id: endpointId });
  await expect.poll(async () => (await listDeliveries()).body.deliveries[0]?.status).toBe("succeeded");
  const deliveries = await listDeliveries();
  expect(deliveries.body.deliveries[0]).toMatchObject({ status: "succeeded", attempts: 1, response_status: 200 });
  expect((await api.put("/webhooks", { endpoint_id: endpointId, enabled: false })).status).toBe(200);
  const resend = await api.post("/webhooks/resend", { delivery_id: deliveries.body.deliveries[0].delivery_id });
  expect(resend.status).toBe(422);
  expect(resend.body.error.code).toBe("invalid_state");
  await new Promise((resolve) => setTimeout(resolve, 500));
  expect(bodies).toHaveLength(1);
});
