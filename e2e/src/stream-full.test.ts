import { DiscardPolicy, jetstreamManager } from "@nats-io/jetstream";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { metricsRegistry } from "@ledger/common";
import { afterAll, beforeAll, expect, it } from "vitest";
import { readStream } from "./events.js";
import { startStack, type Stack } from "./stack.js";

// The event stream has a byte limit and refuses new events when it is full, keeping what it holds.
// Nothing is lost then: writes still commit, their events wait in the outbox, the relay keeps asking,
// and when space frees (here: an operator raises the limit) every event reaches the stream, once.

const MAX_BYTES = 24 * 1024;

let stack: Stack;
let nc: NatsConnection;

beforeAll(async () => {
  stack = await startStack({ streamLimits: { maxBytes: MAX_BYTES } });
  nc = await connect({ servers: stack.natsUrl });
});
afterAll(async () => {
  await nc?.close();
  await stack?.close();
});

async function streamFullErrors(): Promise<number> {
  const metric = await metricsRegistry.getSingleMetric("outbox_publish_errors_total")?.get();
  return metric?.values.filter((v) => v.labels["reason"] === "stream_full").reduce((sum, v) => sum + v.value, 0) ?? 0;
}

async function outboxEvents(): Promise<number> {
  const [row] = await stack.sql<{ n: bigint }[]>`select coalesce(sum(events), 0)::int8 as n from outbox_writes`;
  return Number(row!.n);
}

it("keeps every event in the outbox while the stream is full and publishes each once when space frees", async () => {
  const jsm = await jetstreamManager(nc);
  const created = await jsm.streams.info(stack.stream);
  expect(created.config.max_bytes).toBe(MAX_BYTES);
  expect(created.config.discard).toBe(DiscardPolicy.New);
  const fullBefore = await streamFullErrors();

  const { api } = stack;
  const a = (await api.post("/entity", { entity_name: "a", entity_type: "wallet" })).body.entity.entity_id;
  const b = (await api.post("/entity", { entity_name: "b", entity_type: "wallet" })).body.entity.entity_id;
  const funded = await api.post("/entity/fund", { entity_id: a, amount: 100_000 });
  expect(funded.status).toBe(200);
  const groups: string[] = [funded.body.transaction.credit.transaction_group_id];
  // Far more events than 24 KB holds; every write commits all the same.
  for (let i = 0; i < 200; i += 20) {
    const answers = await Promise.all(
      Array.from({ length: 20 }, (_, j) =>
        api.post("/transaction", { description: `t${i + j}`, amount: 1, status: "posted", account: { from: a, to: b } }),
      ),
    );
    for (const r of answers) {
      expect(r.status).toBe(200);
      groups.push(r.body.transaction_group_id as string);
    }
  }
  const [balances] = await stack.sql<{ posted: bigint }[]>`select posted from entities where id = ${b}`;
  expect(balances!.posted).toBe(200n);

  // The stream stops at its limit, the rest waits in the outbox, and the relay says why.
  await expect.poll(streamFullErrors).toBeGreaterThan(fullBefore);
  await expect.poll(outboxEvents).toBeGreaterThan(0);
  const full = await jsm.streams.info(stack.stream);
  expect(full.state.bytes).toBeLessThanOrEqual(MAX_BYTES);
  const waiting = await outboxEvents();
  await new Promise((resolve) => setTimeout(resolve, 1_500));
  expect(await outboxEvents()).toBe(waiting);

  // Space frees: the events flow, and each is in the stream once.
  await jsm.streams.update(stack.stream, { ...full.config, max_bytes: 16 * 1024 * 1024 });
  await expect.poll(outboxEvents, { timeout: 30_000 }).toBe(0);
  const stored = await readStream(stack.natsUrl, stack.stream);
  const ids = stored.map((s) => s.event.id);
  expect(new Set(ids).size).toBe(ids.length);
  const createdGroups = stored.flatMap((s) =>
    s.event.type === "transaction.created" && s.event.data.case === "transaction" ? [s.event.data.value.transactionGroupId] : [],
  );
  expect(new Set(createdGroups)).toEqual(new Set(groups));
  expect(createdGroups).toHaveLength(groups.length);
});
