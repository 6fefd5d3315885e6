import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { freePort, startWebhookReceiver, type Reply, type WebhookReceiver } from "@ledger/testing";
import { startStack, TEST_SERVICE_TOKEN, type Api, type Stack } from "@ledger/e2e";

// Deliveries at scale, against real HTTPS receivers: the per-destination cap holds across two
// processes, a slow destination does not hold back a fast one, a destination disabled in the
// middle of its backlog stops, retries come in order, and a notification process killed in the
// middle of a batch leaves nothing undelivered and sends no attempt twice but the ones it had in flight.

let receiver: WebhookReceiver;
const stacks: Stack[] = [];
const secretKey = randomBytes(32);

beforeAll(async () => {
  receiver = await startWebhookReceiver();
});
// Each test's stacks close when it ends: held to the end of the file, their connection pools
// together ran past Postgres's connection limit.
afterEach(async () => {
  for (const s of stacks.splice(0)) await s.close();
});
afterAll(async () => {
  await receiver?.close();
});

async function newStack(retries: number[] = [300, 300]): Promise<Stack> {
  const stack = await startStack({
    notification: { webhookExtraCa: receiver.ca, webhookRetryScheduleMs: retries, secretKey, webhookTimeoutMs: 5_000 },
  });
  stacks.push(stack);
  return stack;
}

async function fundMany(api: Api, n: number): Promise<void> {
  const entity = (await api.post("/entity", { entity_name: "w", entity_type: "wallet" })).body.entity.entity_id;
  for (let i = 0; i < n; i += 10) {
    await Promise.all(
      Array.from({ length: Math.min(10, n - i) }, (_, j) => api.post("/entity/fund", { entity_id: entity, amount: i + j + 1 })),
    );
  }
}

/** A reply that answers after `delayMs` and tracks how many requests it holds at once. */
function slowReply(delayMs: number) {
  const state = { now: 0, max: 0 };
  const reply = (): Reply => {
    state.now++;
    state.max = Math.max(state.max, state.now);
    setTimeout(() => state.now--, delayMs);
    return { status: 200, delayMs };
  };
  return { state, reply };
}

async function deliveries(stack: Stack, endpointId: string) {
  return stack.notificationSql!<
    { id: string; event_id: string; status: string; attempts: number; error: string | null; lease_id: string | null }[]
  >`
    select id, event_id, status, attempts, error, lease_id from deliveries where endpoint_id = ${endpointId}`;
}

function countBy<T>(items: T[], key: (t: T) => string): Map<string, number> {
  const counts = new Map<string, number>();
  for (const item of items) counts.set(key(item), (counts.get(key(item)) ?? 0) + 1);
  return counts;
}

describe("two notification processes", () => {
  it("never have more than the destination's max_concurrency attempts in flight, and deliver every event once", async () => {
    const stack = await newStack();
    await stack.startNotificationReplica();
    const slow = slowReply(150);
    const ep = await stack.api.post("/webhooks", { url: receiver.endpoint("/cap-two", slow.reply), max_concurrency: 3 });
    expect(ep.status).toBe(200);
    await fundMany(stack.api, 40);
    await expect
      .poll(async () => (await deliveries(stack, ep.body.endpoint.endpoint_id)).filter((d) => d.status === "succeeded").length, {
        timeout: 60_000,
      })
      .toBe(40);
    expect(slow.state.max).toBeGreaterThan(1);
    expect(slow.state.max).toBeLessThanOrEqual(3);
    const got = receiver.received("/cap-two");
    expect(got).toHaveLength(40);
    expect(new Set(got.map((r) => r.headers["x-service-event-id"])).size).toBe(40);
  });
});

describe("a process waiting on a destination another process holds", () => {
  it("looks again as soon as the other writes its outcomes, not after its own pause", async () => {
    // This stack's process pauses a whole minute when a destination is held elsewhere, so only
    // the other process's notification can bring the second delivery in time. The test plays
    // the other process: it holds the destination's only slot with a lease of its own, then
    // frees it and notifies, as a worker's turn does when it writes outcomes.
    const stack = await startStack({
      notification: {
        webhookExtraCa: receiver.ca,
        secretKey,
        webhookTimeoutMs: 5_000,
        webhookContendedPauseMs: { firstMs: 60_000, maxMs: 60_000 },
      },
    });
    stacks.push(stack);
    const sql = stack.notificationSql!;
    const ep = await stack.api.post("/webhooks", { url: receiver.endpoint("/woken"), max_concurrency: 1 });
    expect(ep.status).toBe(200);
    const endpointId = ep.body.endpoint.endpoint_id as string;
    await fundMany(stack.api, 1);
    await expect.poll(() => receiver.received("/woken").length, { timeout: 10_000 }).toBe(1);

    const [first] = await deliveries(stack, endpointId);
    await sql`
      insert into deliveries (id, account_id, event_id, endpoint_id, status, next_attempt_at, lease_id)
      select 'held-elsewhere', account_id, event_id, endpoint_id, 'pending', now() + interval '1 hour', 'another process'
      from deliveries where id = ${first!.id}`;
    await fundMany(stack.api, 1);
    // The new delivery is stored, and the process has looked at it and found the slot taken.
    await expect.poll(async () => (await deliveries(stack, endpointId)).length, { timeout: 10_000 }).toBe(3);
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    expect(receiver.received("/woken")).toHaveLength(1);

    await sql.begin(async (tx) => {
      await tx`update deliveries set status = 'succeeded', lease_id = null, next_attempt_at = null where id = 'held-elsewhere'`;
      await tx`select pg_notify('webhook_slots_freed', 'another process')`;
    });
    await expect.poll(() => receiver.received("/woken").length, { timeout: 10_000 }).toBe(2);
  });

  it("is told by a turn that wrote outcomes", async () => {
    const stack = await newStack();
    const heard: string[] = [];
    const listener = await stack.notificationSql!.listen("webhook_slots_freed", (from) => void heard.push(from));
    try {
      await stack.api.post("/webhooks", { url: receiver.endpoint("/tells") });
      await fundMany(stack.api, 3);
      await expect.poll(() => receiver.received("/tells").length, { timeout: 10_000 }).toBe(3);
      await expect.poll(() => heard.length, { timeout: 5_000 }).toBeGreaterThan(0);
      // One process, so every notification names the same worker.
      expect(new Set(heard).size).toBe(1);
    } finally {
      await listener.unlisten();
    }
  });
});

describe("a slow destination beside a fast one", () => {
  it("does not hold the fast one back", async () => {
    const stack = await newStack();
    await stack.api.post("/webhooks", { url: receiver.endpoint("/two-s", () => ({ status: 200, delayMs: 2_000 })), max_concurrency: 2 });
    await stack.api.post("/webhooks", { url: receiver.endpoint("/at-once") });
    await fundMany(stack.api, 40);
    // At 2 s an answer and 2 at a time the slow one needs 40 s for its 40; the fast one is done long before.
    await expect.poll(() => receiver.received("/at-once").length, { timeout: 30_000, interval: 50 }).toBe(40);
    expect(receiver.received("/two-s").length).toBeLessThan(20);
  });
});

describe("a destination disabled in the middle of its backlog", () => {
  it("gets nothing more once the attempts in flight end; the rest end endpoint_disabled", async () => {
    const stack = await newStack();
    const ep = await stack.api.post("/webhooks", {
      url: receiver.endpoint("/disabled-mid", () => ({ status: 200, delayMs: 100 })),
      max_concurrency: 2,
    });
    const id = ep.body.endpoint.endpoint_id;
    await fundMany(stack.api, 40);
    await expect.poll(() => receiver.received("/disabled-mid").length, { timeout: 30_000, interval: 20 }).toBeGreaterThanOrEqual(4);
    expect((await stack.api.put("/webhooks", { endpoint_id: id, enabled: false })).status).toBe(200);
    await expect
      .poll(async () => (await deliveries(stack, id)).every((d) => d.lease_id === null && d.status !== "pending"), { timeout: 30_000 })
      .toBe(true);
    const rows = await deliveries(stack, id);
    const received = receiver.received("/disabled-mid").length;
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    expect(receiver.received("/disabled-mid")).toHaveLength(received);
    // Every attempt made is recorded, and what was not sent ended as the destination's stop.
    expect(rows.reduce((n, d) => n + d.attempts, 0)).toBe(received);
    expect(received).toBeLessThan(40);
    for (const d of rows) {
      if (d.status === "succeeded") expect(d.attempts).toBe(1);
      else expect(d).toMatchObject({ status: "failed", error: "endpoint_disabled" });
    }
    expect(rows.filter((d) => d.status === "failed" && d.attempts === 0).length).toBeGreaterThan(0);
  });
});

describe("retries", () => {
  it("come in order, each after its gap, with the attempt counted on the delivery", async () => {
    const stack = await newStack([200, 400]);
    // Each delivery fails twice, then succeeds.
    const seen = new Map<string, number>();
    const ep = await stack.api.post("/webhooks", {
      url: receiver.endpoint("/retry-order", (_n, req) => {
        const id = String(req.headers["x-service-delivery-id"]);
        const n = (seen.get(id) ?? 0) + 1;
        seen.set(id, n);
        return { status: n < 3 ? 503 : 200 };
      }),
    });
    await fundMany(stack.api, 10);
    const id = ep.body.endpoint.endpoint_id;
    await expect
      .poll(async () => (await deliveries(stack, id)).filter((d) => d.status === "succeeded").length, { timeout: 30_000 })
      .toBe(10);
    const byDelivery = new Map<string, number[]>();
    for (const r of receiver.received("/retry-order")) {
      const list = byDelivery.get(String(r.headers["x-service-delivery-id"])) ?? [];
      list.push(r.at);
      byDelivery.set(String(r.headers["x-service-delivery-id"]), list);
    }
    expect(byDelivery.size).toBe(10);
    for (const [, times] of byDelivery) {
      expect(times).toHaveLength(3);
      // The schedule's gaps less their 10% jitter, and a little for clocks read in two processes.
      expect(times[1]! - times[0]!).toBeGreaterThanOrEqual(200 * 0.9 - 5);
      expect(times[2]! - times[1]!).toBeGreaterThanOrEqual(400 * 0.9 - 5);
    }
    for (const d of await deliveries(stack, id)) expect(d).toMatchObject({ status: "succeeded", attempts: 3, error: null });
  });
});

describe("a notification process killed in the middle of a batch", () => {
  let child: ChildProcess | undefined;
  let dir: string | undefined;
  afterAll(() => {
    child?.kill("SIGKILL");
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it("leaves every event delivered by the next one, and only its in-flight attempts sent twice", async () => {
    const stack = await newStack();
    const ep = await stack.api.post("/webhooks", {
      url: receiver.endpoint("/killed", () => ({ status: 200, delayMs: 200 })),
      max_concurrency: 8,
    });
    const id = ep.body.endpoint.endpoint_id;
    // The stack's own process goes; this one runs as a child the test can kill.
    await stack.notification!.close();
    const [row] = await stack.notificationSql!<{ name: string }[]>`select current_database() as name`;
    const databaseUrl = new URL(stack.databaseUrl);
    databaseUrl.pathname = `/${row!.name}`;
    dir = mkdtempSync(join(tmpdir(), "ledger-kill-"));
    writeFileSync(join(dir, "ca.pem"), receiver.ca);
    const env = {
      ...process.env,
      NOTIFICATION_DATABASE_URL: databaseUrl.toString(),
      NATS_URL: stack.natsUrl,
      NATS_STREAM: stack.stream,
      NATS_SUBJECT_PREFIX: stack.subjectPrefix,
      LEDGER_URL: stack.ledgerUrl,
      SERVICE_TOKEN: TEST_SERVICE_TOKEN,
      NOTIFICATION_SECRET_KEY: secretKey.toString("base64"),
      WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true",
      // The lease of a killed attempt runs out after the timeout and 30 s.
      WEBHOOK_TIMEOUT_MS: "1000",
      WEBHOOK_RETRY_SCHEDULE: "300ms,300ms",
      NODE_EXTRA_CA_CERTS: join(dir, "ca.pem"),
      LOG_LEVEL: "error",
    };
    const root = fileURLToPath(new URL("../../../", import.meta.url));
    const start = async () =>
      spawn(process.execPath, ["--import", "tsx", "services/notification/src/main.ts"], {
        cwd: root,
        env: { ...env, NOTIFICATION_PORT: String(await freePort()) },
        stdio: "ignore",
      });
    child = await start();
    await fundMany(stack.api, 60);
    await expect.poll(() => receiver.received("/killed").length, { timeout: 30_000, interval: 10 }).toBeGreaterThanOrEqual(10);
    child.kill("SIGKILL");
    await new Promise((resolve) => child!.once("exit", resolve));
    const inFlight = new Set((await deliveries(stack, id)).filter((d) => d.status === "pending" && d.lease_id !== null).map((d) => d.id));
    const beforeKill = receiver.received("/killed").length;
    expect(beforeKill).toBeLessThan(60);

    child = await start();
    await expect
      .poll(async () => (await deliveries(stack, id)).filter((d) => d.status === "succeeded").length, { timeout: 90_000, interval: 200 })
      .toBe(60);
    const got = receiver.received("/killed");
    const perEvent = countBy(got, (r) => String(r.headers["x-service-event-id"]));
    expect(perEvent.size).toBe(60);
    // A delivery reaches the receiver twice only when its attempt was in flight at the kill.
    for (const [delivery, n] of countBy(got, (r) => String(r.headers["x-service-delivery-id"]))) {
      expect(n).toBeLessThanOrEqual(inFlight.has(delivery) ? 2 : 1);
    }
    for (const d of await deliveries(stack, id)) expect(d).toMatchObject({ status: "succeeded", attempts: 1 });
  }, 150_000);
});
