import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startWebhookReceiver, type WebhookReceiver } from "@ledger/testing";
import { startStack, type Api, type Stack } from "@ledger/e2e";

// Destinations over time: deletion stops retries, two processes share the work without sending an
// attempt twice, stats cover 7 days, and the events list pages cleanly while events keep coming.
// Retries here are 1.5 s apart, long enough to act between two attempts.

let stack: Stack;
let api: Api;
let receiver: WebhookReceiver;

beforeAll(async () => {
  receiver = await startWebhookReceiver();
  stack = await startStack({ notification: { webhookExtraCa: receiver.ca, webhookRetryScheduleMs: [1_500, 1_500, 1_500] } });
  api = stack.api;
});
afterAll(async () => {
  await stack?.close();
  await receiver?.close();
});

let paths = 0;
async function endpoint(client: Api, reply?: Parameters<WebhookReceiver["endpoint"]>[1]) {
  const path = `/life-${++paths}`;
  const res = await client.post("/webhooks", { url: receiver.endpoint(path, reply) });
  expect(res.status).toBe(200);
  return { path, id: res.body.endpoint.endpoint_id as string };
}

async function fund(client: Api): Promise<void> {
  const entity = await client.post("/entity", { entity_name: "w", entity_type: "wallet" });
  expect((await client.post("/entity/fund", { entity_id: entity.body.entity.entity_id, amount: 100 })).status).toBe(200);
}

interface Row {
  id: string;
  status: string;
  attempts: number;
  error: string | null;
}
const deliveryRows = (endpointId: string) =>
  stack.notificationSql!<
    Row[]
  >`select id, status, attempts, error from notification.deliveries where endpoint_id = ${endpointId} order by id`;

describe("deleting a destination", () => {
  it("stops its pending retries, and it answers 404 afterwards", async () => {
    const ep = await endpoint(api, () => ({ status: 500 }));
    await fund(api);
    await expect.poll(() => receiver.received(ep.path).length).toBe(1);
    const [delivery] = await deliveryRows(ep.id);
    expect((await api.request("DELETE", "/webhooks", { query: { endpoint_id: ep.id } })).body).toEqual({ status: "success" });
    expect(await deliveryRows(ep.id)).toEqual([expect.objectContaining({ status: "failed", error: "endpoint_deleted" })]);
    // Longer than the 1.5 s gap: no retry arrives.
    await new Promise((r) => setTimeout(r, 2_500));
    expect(receiver.received(ep.path)).toHaveLength(1);
    expect((await api.get("/webhook", { id: ep.id })).status).toBe(404);
    expect((await api.get("/webhooks/deliveries", { endpoint_id: ep.id })).status).toBe(404);
    expect((await api.post("/webhooks/resend", { delivery_id: delivery!.id })).status).toBe(404);
    expect((await api.request("DELETE", "/webhooks", { query: { endpoint_id: ep.id } })).status).toBe(404);
    const listed = (await api.get("/webhooks", { limit: "100" })).body.endpoints.map((e: { endpoint_id: string }) => e.endpoint_id);
    expect(listed).not.toContain(ep.id);
  });

  it("ends pending retries of a disabled destination as endpoint_disabled", async () => {
    const ep = await endpoint(api, () => ({ status: 500 }));
    await fund(api);
    // Wait until the first attempt is recorded, so the one in flight is not what the PUT stops.
    await expect.poll(async () => (await deliveryRows(ep.id))[0]?.attempts).toBe(1);
    expect((await api.put("/webhooks", { endpoint_id: ep.id, enabled: false })).status).toBe(200);
    expect(await deliveryRows(ep.id)).toEqual([expect.objectContaining({ status: "failed", error: "endpoint_disabled", attempts: 1 })]);
    await new Promise((r) => setTimeout(r, 2_000));
    expect(receiver.received(ep.path)).toHaveLength(1);
  });
});

describe("several processes", () => {
  it("deliver each attempt exactly once between two notification processes on one database", async () => {
    const replica = await stack.startNotificationReplica();
    expect(replica.server.url).not.toBe(stack.notification!.server.url);
    const { api: other } = await stack.newAccount("replicas");
    const ep = await endpoint(other);
    const events = 30;
    await Promise.all(Array.from({ length: events }, () => fund(other)));
    await expect
      .poll(async () => (await deliveryRows(ep.id)).filter((d) => d.status === "succeeded").length, { timeout: 30_000 })
      .toBe(events);
    // Give a would-be duplicate time to arrive.
    await new Promise((r) => setTimeout(r, 500));
    const got = receiver.received(ep.path);
    expect(got).toHaveLength(events);
    expect(new Set(got.map((g) => g.headers["x-service-delivery-id"])).size).toBe(events);
    const rows = await deliveryRows(ep.id);
    expect(rows.every((d) => d.attempts === 1)).toBe(true);
    const [attempts] = await stack.notificationSql!<
      { n: number }[]
    >`select count(*)::int as n from notification.delivery_attempts where endpoint_id = ${ep.id}`;
    expect(attempts!.n).toBe(events);
  });
});

describe("stats", () => {
  it("count only the attempts of the last 7 days", async () => {
    const ep = await endpoint(api);
    await fund(api);
    await fund(api);
    await expect.poll(async () => (await deliveryRows(ep.id)).map((d) => d.status)).toEqual(["succeeded", "succeeded"]);
    const [delivery] = await deliveryRows(ep.id);
    // Older attempts that must not count, and one recent failure that must.
    await stack.notificationSql!`
      insert into notification.delivery_attempts (delivery_id, endpoint_id, attempted_at, succeeded, response_status, duration_ms, error)
      values (${delivery!.id}, ${ep.id}, now() - interval '8 days', false, 500, 90000, null),
             (${delivery!.id}, ${ep.id}, now() - interval '7 days 1 minute', true, 200, 90000, null),
             (${delivery!.id}, ${ep.id}, now() - interval '6 days', false, null, 1000, 'timeout')`;
    const [real] = await stack.notificationSql!<{ avg: number }[]>`
      select round(avg(duration_ms))::int as avg from notification.delivery_attempts
      where endpoint_id = ${ep.id} and attempted_at > now() - interval '7 days'`;
    const res = await api.get("/webhook", { id: ep.id });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      status: "success",
      endpoint: expect.objectContaining({
        endpoint_id: ep.id,
        url: receiver.endpoint(ep.path),
        name: expect.any(String),
        enabled: true,
        event_types: null,
      }),
      stats: { total: 3, succeeded: 2, failed: 1, avg_ms: real!.avg },
    });
    expect(res.body.endpoint.secret).toBeUndefined();
  });
});

describe("events list", () => {
  it("walks every event exactly once while new ones arrive, with summaries that match the deliveries", async () => {
    const { api: own } = await stack.newAccount("events");
    const ok = await endpoint(own);
    const failing = await endpoint(own, () => ({ status: 500 }));
    expect((await own.put("/webhooks", { endpoint_id: failing.id, event_types: ["transaction.posted"] })).status).toBe(200);
    for (let i = 0; i < 7; i++) await fund(own);
    await expect.poll(async () => (await own.get("/events", { limit: "100" })).body.events.length).toBe(7);
    const before = (await own.get("/events", { limit: "100" })).body.events.map((e: { event_id: string }) => e.event_id);
    expect([...before].sort().reverse()).toEqual(before);

    const seen: string[] = [];
    let funded = 7;
    let cursor: string | null = null;
    do {
      const page: Awaited<ReturnType<Api["get"]>> = await own.get("/events", { limit: "3", ...(cursor ? { cursor } : {}) });
      expect(page.status).toBe(200);
      expect(page.body.pagination.limit).toBe(3);
      for (const e of page.body.events) {
        expect(Object.keys(e).sort()).toEqual(["created_at", "deliveries", "event_id", "type"]);
        expect(e.type).toBe("transaction.created");
      }
      seen.push(...page.body.events.map((e: { event_id: string }) => e.event_id));
      cursor = page.body.pagination.next_cursor;
      expect(page.body.pagination.has_next).toBe(cursor !== null);
      await fund(own); // a newer event, which must not shift the pages
      funded++;
    } while (cursor);
    // New events may appear on the first page only if they arrived before it was read; none repeat.
    expect(new Set(seen).size).toBe(seen.length);
    expect(seen.filter((id) => before.includes(id))).toEqual(before);

    // Every funded event stored (the last ones may still be on their way) and delivered.
    await expect
      .poll(async () => {
        const events = (await own.get("/events", { limit: "100" })).body.events;
        return events.length === funded && events.every((e: { deliveries: { pending: number } }) => e.deliveries.pending === 0);
      })
      .toBe(true);
    const all = (await own.get("/events", { limit: "100" })).body.events;
    for (const e of all) {
      const detail = await own.get("/event", { id: e.event_id });
      const ds = detail.body.deliveries as Array<{ status: string }>;
      expect(e.deliveries).toEqual({
        total: ds.length,
        succeeded: ds.filter((d) => d.status === "succeeded").length,
        failed: ds.filter((d) => d.status === "failed").length,
        pending: ds.filter((d) => d.status === "pending").length,
      });
      // The failing destination only subscribes to transaction.posted: each event went to `ok` alone.
      expect(e.deliveries).toEqual({ total: 1, succeeded: 1, failed: 0, pending: 0 });
    }
    expect(receiver.received(failing.path)).toHaveLength(0);
    expect(receiver.received(ok.path).length).toBe(all.length);
  });
});

describe("a slow destination", () => {
  let slowStack: Stack | undefined;
  afterAll(async () => slowStack?.close());

  it("does not hold back the others: at most its cap of attempts is in flight", async () => {
    // Three attempts in flight per process, one per destination, a 3 s timeout. Without the cap
    // the hanging destination's deliveries would take every slot for 3 s at a time.
    slowStack = await startStack({
      notification: { webhookExtraCa: receiver.ca, webhookConcurrency: 3, webhookTimeoutMs: 3_000, webhookRetryScheduleMs: [60_000] },
    });
    const own = slowStack.api;
    await own.post("/webhooks", { url: receiver.endpoint("/slow", () => "hang"), max_concurrency: 1 });
    const fast = (await own.post("/webhooks", { url: receiver.endpoint("/fast"), max_concurrency: 1 })).body.endpoint.endpoint_id;
    const started = Date.now();
    for (let i = 0; i < 6; i++) await fund(own);
    await expect
      .poll(
        async () =>
          ((await own.get("/webhooks/deliveries", { endpoint_id: fast })).body.deliveries as { status: string }[]).map((d) => d.status),
        { timeout: 10_000, interval: 50 },
      )
      .toEqual(Array(6).fill("succeeded"));
    // Well before the slow destination's first attempt times out.
    expect(Date.now() - started).toBeLessThan(3_000);
    expect(receiver.received("/slow").length).toBeLessThanOrEqual(1);
  });
});

describe("a restart", () => {
  // Last in this file: it replaces the stack's notification process, which the gateway talks to.
  it("keeps a due retry: a new process sends it after the old one stopped", async () => {
    const ep = await endpoint(api, (n) => (n === 1 ? { status: 500 } : { status: 200 }));
    await fund(api);
    await expect.poll(async () => (await deliveryRows(ep.id))[0]?.attempts).toBe(1);
    await stack.notification!.close();
    await stack.startNotificationReplica();
    await expect.poll(async () => (await deliveryRows(ep.id))[0]?.status, { timeout: 10_000 }).toBe("succeeded");
    expect(await deliveryRows(ep.id)).toEqual([expect.objectContaining({ status: "succeeded", attempts: 2, error: null })]);
    expect(receiver.received(ep.path)).toHaveLength(2);
  });
});

describe("upkeep", () => {
  it("has autovacuum visit the deliveries queue after 10,000 dead rows, not after a fifth of the table", async () => {
    const [row] = await stack.notificationSql!<{ reloptions: string[] | null }[]>`
      select c.reloptions from pg_class c join pg_namespace n on n.oid = c.relnamespace
      where n.nspname = 'notification' and c.relname = 'deliveries'`;
    expect(row!.reloptions).toEqual(expect.arrayContaining(["autovacuum_vacuum_scale_factor=0", "autovacuum_vacuum_threshold=10000"]));
  });
});
