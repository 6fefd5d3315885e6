import { jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { ownNatsCluster, startWebhookReceiver, type OwnNatsCluster, type WebhookReceiver } from "@ledger/testing";
import { afterAll, beforeAll, expect, it } from "vitest";
import { readStream } from "./events.js";
import { startStack, type Stack } from "./stack.js";

// The event stream on a three-node NATS cluster with 3 replicas, as deployed: the stream's leader is
// killed in the middle of a burst of transfers. JetStream elects another among the two left, the
// relays publish again what was not acknowledged (its duplicate window drops what was), and the
// notification service's consumer moves with the stream: every committed event is in the stream
// once, and reaches the webhook once.

let cluster: OwnNatsCluster;
let receiver: WebhookReceiver;
let stack: Stack;

/** Waits until the cluster has a JetStream meta leader and can place a stream on all three nodes. */
async function clusterReady(url: string): Promise<void> {
  const nc = await connect({ servers: url.split(","), timeout: 5_000 });
  try {
    // Not the API check jetstreamManager makes by default: it fails until there is a meta leader.
    const jsm = await jetstreamManager(nc, { checkAPI: false });
    const name = `TEST_READY_${process.pid}`;
    const deadline = Date.now() + 30_000;
    for (;;) {
      try {
        await jsm.streams.add({ name, subjects: [`ready${process.pid}.>`], num_replicas: 3 });
        await jsm.streams.delete(name);
        return;
      } catch (err) {
        if (Date.now() > deadline) throw new Error(`the NATS cluster did not become ready: ${(err as Error).message}`);
        await new Promise((resolve) => setTimeout(resolve, 500));
      }
    }
  } finally {
    await nc.close();
  }
}

beforeAll(async () => {
  cluster = await ownNatsCluster(3);
  await clusterReady(cluster.url);
  receiver = await startWebhookReceiver();
  stack = await startStack({ natsUrl: cluster.url, streamLimits: { replicas: 3 }, notification: { webhookExtraCa: receiver.ca } });
});
afterAll(async () => {
  await stack?.close();
  await receiver?.close();
  await cluster?.dispose();
});

it("loses and repeats no event when the stream's leader is killed in the middle of a burst", async () => {
  const { api } = stack;
  expect((await api.post("/webhooks", { url: receiver.endpoint("/cluster") })).status).toBe(200);
  const a = (await api.post("/entity", { entity_name: "a", entity_type: "wallet" })).body.entity.entity_id;
  const b = (await api.post("/entity", { entity_name: "b", entity_type: "wallet" })).body.entity.entity_id;
  expect((await api.post("/entity/fund", { entity_id: a, amount: 1_000_000 })).status).toBe(200);

  const nc = await connect({ servers: cluster.url.split(",") });
  const jsm = await jetstreamManager(nc);
  const info = await jsm.streams.info(stack.stream);
  expect(info.config.num_replicas).toBe(3);
  const leader = cluster.nodes.find((n) => n.name === info.cluster?.leader);
  expect(leader, `the stream's leader ${info.cluster?.leader}`).toBeDefined();
  await nc.close();

  const groups: string[] = [];
  for (let wave = 0; wave < 20; wave++) {
    if (wave === 8) await leader!.stop();
    const answers = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        api.post("/transaction", { description: `w${wave}-${i}`, amount: 1, status: "posted", account: { from: a, to: b } }),
      ),
    );
    for (const r of answers) {
      expect(r.status).toBe(200);
      groups.push(r.body.transaction_group_id as string);
    }
  }

  const alive = cluster.nodes.find((n) => n !== leader)!;
  const created = async () =>
    (await readStream(alive.url, stack.stream)).filter(
      (s) => s.event.type === "transaction.created" && s.event.data.case === "transaction",
    );
  // 400 transfers and the funding.
  await expect.poll(async () => (await created()).length, { timeout: 60_000, interval: 1_000 }).toBeGreaterThanOrEqual(groups.length + 1);
  const stored = await created();
  const storedIds = stored.map((s) => s.event.id);
  expect(new Set(storedIds).size).toBe(storedIds.length);
  const storedGroups = new Set(stored.map((s) => (s.event.data.case === "transaction" ? s.event.data.value.transactionGroupId : "")));
  for (const g of groups) expect(storedGroups.has(g), g).toBe(true);

  // Each of them delivered once.
  const delivered = () =>
    receiver
      .received("/cluster")
      .map((r) => JSON.parse(r.body) as { id: string; type: string })
      .filter((e) => e.type === "transaction.created");
  await expect.poll(() => delivered().length, { timeout: 60_000, interval: 1_000 }).toBeGreaterThanOrEqual(storedIds.length);
  await new Promise((resolve) => setTimeout(resolve, 2_000));
  const deliveredIds = delivered().map((e) => e.id);
  expect(new Set(deliveredIds).size).toBe(deliveredIds.length);
  expect(new Set(deliveredIds)).toEqual(new Set(storedIds));
});
