import { afterAll, describe, expect, it } from "vitest";
import { NATS_SERVER_BIN, ownNats, type OwnNats } from "@ledger/testing";
import { readStream, startStack, type Stack } from "@ledger/e2e";

// The outbox promise (docs/architecture.md#the-transactional-outbox-and-the-relay): every committed change has its event on JetStream,
// exactly once per event id, even when NATS is down while the writes happen.
// This test runs a nats-server of its own so it can stop and start it.

describe.runIf(NATS_SERVER_BIN)("outbox relay", () => {
  let stack: Stack | undefined;
  let nats: OwnNats | undefined;

  afterAll(async () => {
    await stack?.close();
    await nats?.dispose();
  });

  it("publishes every transaction event exactly once, also across a NATS outage", async () => {
    nats = await ownNats();
    await nats.start();
    stack = await startStack({ natsUrl: nats.url });
    const { api } = stack;
    const a = (await api.post("/entity", { entity_name: "a", entity_type: "wallet" })).body.entity.entity_id;
    const b = (await api.post("/entity", { entity_name: "b", entity_type: "wallet" })).body.entity.entity_id;
    const groups: string[] = [];
    const expectCreated = async (res: {
      status: number;
      body: { transaction_group_id?: string; transaction?: { credit?: { transaction_group_id: string } } };
    }) => {
      expect(res.status).toBe(200);
      groups.push(res.body.transaction_group_id ?? res.body.transaction!.credit!.transaction_group_id);
    };

    await expectCreated(await api.post("/entity/fund", { entity_id: a, amount: 10_000 }));
    for (let i = 0; i < 10; i++) {
      await expectCreated(
        await api.post("/transaction", { description: `before ${i}`, amount: 10, status: "posted", account: { from: a, to: b } }),
      );
    }
    const pending = await api.post("/transaction", { description: "to settle", amount: 5, account: { from: a, to: b } });
    await expectCreated(pending);

    await nats.stop();
    // Writes keep succeeding while NATS is down; their events wait in the outbox.
    for (let i = 0; i < 10; i++) {
      await expectCreated(
        await api.post("/transaction", { description: `during ${i}`, amount: 10, status: "posted", account: { from: a, to: b } }),
      );
    }
    const posted = await api.post("/transaction/post", { transaction_group_id: pending.body.transaction_group_id });
    expect(posted.status).toBe(200);
    const [backlog] = await stack.sql<{ n: bigint }[]>`select coalesce(sum(events), 0)::int8 as n from outbox_writes`;
    expect(backlog!.n).toBeGreaterThan(0n);

    await nats.start();
    await expect
      .poll(async () => (await stack!.sql<{ n: bigint }[]>`select coalesce(sum(events), 0)::int8 as n from outbox_writes`)[0]!.n, {
        timeout: 30_000,
      })
      .toBe(0n);

    const stored = await readStream(nats.url, stack.stream);
    const ids = stored.map((s) => s.msgId);
    expect(new Set(ids).size).toBe(ids.length);
    for (const s of stored) {
      expect(s.msgId).toBe(s.event.id);
      expect(s.subject).toBe(`${stack.subjectPrefix}.events.${s.event.type}`);
      expect(s.event.accountId).toBe(stack.account.account_id);
    }
    const created = stored.filter((s) => s.event.type === "transaction.created");
    const createdGroups = created.map((s) => (s.event.data.case === "transaction" ? s.event.data.value.transactionGroupId : ""));
    expect(createdGroups.sort()).toEqual([...groups].sort());
    const settled = stored.filter((s) => s.event.type === "transaction.posted");
    expect(settled).toHaveLength(1);
    const data = settled[0]!.event.data;
    expect(data.case).toBe("transaction");
    if (data.case === "transaction") {
      expect(data.value).toMatchObject({
        transactionGroupId: pending.body.transaction_group_id,
        amount: 5n,
        currencyCode: "USD",
        status: "posted",
      });
      expect(data.value.legs).toHaveLength(2);
    }
  });

  it("emits the lifecycle events with the group as it is after each change", async () => {
    const { api } = stack!;
    const a = (await api.post("/entity", { entity_name: "a", entity_type: "wallet" })).body.entity.entity_id;
    const b = (await api.post("/entity", { entity_name: "b", entity_type: "wallet" })).body.entity.entity_id;
    await api.post("/entity/fund", { entity_id: a, amount: 1_000 });
    const cancel = await api.post("/transaction", { description: "c", amount: 1, account: { from: a, to: b } });
    await api.post("/transaction/cancel", { transaction_group_id: cancel.body.transaction_group_id });
    const fail = await api.post("/transaction", { description: "f", amount: 1, account: { from: a, to: b } });
    await api.post("/transaction/fail", { transaction_group_id: fail.body.transaction_group_id, reason: "declined" });
    const post = await api.post("/transaction", { description: "r", amount: 3, status: "posted", account: { from: a, to: b } });
    await api.post("/transaction/dispute", { transaction_group_id: post.body.transaction_group_id, reason: "fraud" });
    const reversed = await api.post("/transaction/reverse", { transaction_group_id: post.body.transaction_group_id });

    const wanted = ["transaction.canceled", "transaction.failed", "transaction.disputed", "transaction.reversed"];
    await expect
      .poll(async () => (await readStream(stack!.natsUrl, stack!.stream)).map((s) => s.event.type))
      .toEqual(expect.arrayContaining(wanted));
    const stored = await readStream(stack!.natsUrl, stack!.stream);
    const byType = (type: string) => stored.filter((s) => s.event.type === type).map((s) => s.event.data.value!);
    expect(byType("transaction.failed")[0]).toMatchObject({ status: "failed", reason: "declined" });
    expect(byType("transaction.disputed")[0]).toMatchObject({ status: "posted", disputed: true, reason: "fraud" });
    expect(byType("transaction.reversed")[0]).toMatchObject({
      transactionGroupId: post.body.transaction_group_id,
      reversalTransactionGroupId: reversed.body.reversal_transaction_group_id,
      status: "reversed",
    });
    const ids = stored.map((s) => s.msgId);
    expect(new Set(ids).size).toBe(ids.length);
  });
});
