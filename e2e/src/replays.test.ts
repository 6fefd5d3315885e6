import type { CallOptions } from "@connectrpc/connect";
import { TransactionStatus } from "@ledger/proto/ledger/v1/ledger_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ApiResponse } from "./rest-client.js";
import { ledgerViolations } from "./invariants.js";
import { startStack, type Stack } from "./stack.js";

// A retry with an Idempotency-Key answers its first success, whatever happened since
// (docs/api.md#idempotency): the money rules are never checked again for a replay. Each keyed write
// path is tried with the balances moved (or the state changed) between the first call and its
// replay, so checking the rules again would refuse it, and with identical requests racing.

let stack: Stack;
beforeAll(async () => {
  stack = await startStack();
});
afterAll(async () => stack?.close());

let keys = 0;
const newKey = () => `replay-${process.pid}-${++keys}`;

async function entity(amount = 0): Promise<string> {
  const res = await stack.api.post("/entity", { entity_name: "replay", entity_type: "wallet" });
  expect(res.status).toBe(200);
  const id = res.body.entity.entity_id as string;
  if (amount > 0) expect((await stack.api.post("/entity/fund", { entity_id: id, amount })).status).toBe(200);
  return id;
}

const balances = async (id: string) => (await stack.api.get("/entity", { entity_id: id })).body.entity.balances;

/** The first call succeeds; after `between` changes what the rules would see, the same call replays it. */
async function expectReplayAfter(call: () => Promise<ApiResponse>, between: () => Promise<unknown> = async () => {}) {
  const first = await call();
  expect(first.status, JSON.stringify(first.body)).toBe(200);
  expect(first.headers.get("idempotent-replayed")).toBeNull();
  await between();
  const again = await call();
  expect(again.status, JSON.stringify(again.body)).toBe(200);
  expect(again.headers.get("idempotent-replayed")).toBe("true");
  expect(again.body).toEqual(first.body);
  return first;
}

const keyed = (key: string) => ({ "idempotency-key": key });

describe("a replay after the balances moved answers its first success", () => {
  it.each([
    ["pending", "pending"],
    ["posted", "posted"],
  ])("POST /transaction, two-party, %s", async (_, status) => {
    const [from, to] = [await entity(100), await entity()];
    const key = newKey();
    await expectReplayAfter(() =>
      stack.api.post("/transaction", { description: "all of it", amount: 100, status, account: { from, to } }, keyed(key)),
    );
    expect((await balances(from)).available).toBe(0);
  });

  it("POST /transaction with entries", async () => {
    const [from, to] = [await entity(100), await entity()];
    const key = newKey();
    const body = {
      description: "legs",
      status: "posted",
      entries: [
        { entity_id: from, direction: "debit", amount: 100 },
        { entity_id: to, direction: "credit", amount: 100 },
      ],
    };
    await expectReplayAfter(() => stack.api.post("/transaction", body, keyed(key)));
    expect((await balances(to)).posted).toBe(100);
  });

  it("POST /entity/defund, and /entity/fund with the money spent since", async () => {
    const id = await entity(100);
    const defund = newKey();
    await expectReplayAfter(() => stack.api.post("/entity/defund", { entity_id: id, amount: 100 }, keyed(defund)));
    const fund = newKey();
    const other = await entity();
    await expectReplayAfter(
      () => stack.api.post("/entity/fund", { entity_id: id, amount: 50 }, keyed(fund)),
      () => stack.api.post("/transaction", { description: "spend", amount: 50, status: "posted", account: { from: id, to: other } }),
    );
    expect((await balances(id)).posted).toBe(0);
  });

  it("POST /transaction/batch, atomic, with the call's key", async () => {
    const [from, to] = [await entity(100), await entity()];
    const key = newKey();
    const body = { atomic: true, transactions: [{ description: "batch", amount: 100, status: "posted", account: { from, to } }] };
    await expectReplayAfter(() => stack.api.post("/transaction/batch", body, keyed(key)));
    expect((await balances(to)).posted).toBe(100);
  });

  it.each([true, false])("POST /transaction/batch, atomic %s, with an item's key", async (atomic) => {
    const [from, to] = [await entity(100), await entity()];
    const item = { description: "item", amount: 100, status: "posted", account: { from, to }, idempotency_key: newKey() };
    const first = await stack.api.post("/transaction/batch", { atomic, transactions: [item] });
    expect(first.status, JSON.stringify(first.body)).toBe(200);
    expect(first.body.results[0].status).toBe("success");
    const again = await stack.api.post("/transaction/batch", { atomic, transactions: [item] });
    expect(again.status, JSON.stringify(again.body)).toBe(200);
    expect(again.body.results[0]).toMatchObject({
      status: "success",
      replayed: true,
      transaction_group_id: first.body.results[0].transaction_group_id,
    });
    expect((await balances(to)).posted).toBe(100);
  });

  it("POST /transaction/post, cancel, fail, reverse and dispute after the group moved on", async () => {
    const [from, to] = [await entity(300), await entity(100)];
    const pending = async () =>
      (await stack.api.post("/transaction", { description: "p", amount: 100, account: { from, to } })).body.transaction_group_id as string;
    const [toPost, toCancel, toFail] = [await pending(), await pending(), await pending()];
    const post = newKey();
    await expectReplayAfter(
      () => stack.api.post("/transaction/post", { transaction_group_id: toPost }, keyed(post)),
      () => stack.api.post("/transaction/reverse", { transaction_group_id: toPost }),
    );
    const [cancel, fail] = [newKey(), newKey()];
    await expectReplayAfter(() => stack.api.post("/transaction/cancel", { transaction_group_id: toCancel }, keyed(cancel)));
    await expectReplayAfter(() => stack.api.post("/transaction/fail", { transaction_group_id: toFail }, keyed(fail)));

    const posted = (
      await stack.api.post("/transaction", { description: "q", amount: 50, status: "posted", account: { from: to, to: from } })
    ).body.transaction_group_id as string;
    const dispute = newKey();
    await expectReplayAfter(
      () => stack.api.post("/transaction/dispute", { transaction_group_id: posted }, keyed(dispute)),
      () => stack.api.post("/transaction/reverse", { transaction_group_id: posted }),
    );
    const reverse = newKey();
    const again = (
      await stack.api.post("/transaction", { description: "r", amount: 50, status: "posted", account: { from: to, to: from } })
    ).body.transaction_group_id as string;
    await expectReplayAfter(() => stack.api.post("/transaction/reverse", { transaction_group_id: again }, keyed(reverse)));
  });

  it("POST /hold, /hold/capture and /hold/release with the money gone since", async () => {
    const [source, dest] = [await entity(100), await entity()];
    const create = newKey();
    const held = await expectReplayAfter(() => stack.api.post("/hold", { entity_id: source, amount: 100 }, keyed(create)));
    const holdId = held.body.hold.hold_id as string;
    const capture = newKey();
    await expectReplayAfter(() =>
      stack.api.post("/hold/capture", { hold_id: holdId, amount: 100, destination_entity_id: dest }, keyed(capture)),
    );
    expect((await balances(dest)).posted).toBe(100);

    const other = await entity(40);
    const second = (await stack.api.post("/hold", { entity_id: other, amount: 40 })).body.hold.hold_id as string;
    const release = newKey();
    await expectReplayAfter(
      () => stack.api.post("/hold/release", { hold_id: second }, keyed(release)),
      () => stack.api.post("/entity/defund", { entity_id: other, amount: 40 }),
    );
    expect(await balances(other)).toMatchObject({ posted: 0, held: 0, available: 0 });
  });

  it("RPC CreateTransaction, DefundEntity and CreateTransactions", async () => {
    const client = stack.ledgerClient(stack.account.api_key);
    const [from, to] = [await entity(300), await entity()];
    const transfer = {
      description: "rpc",
      status: TransactionStatus.POSTED,
      form: { case: "transfer" as const, value: { fromEntityId: from, toEntityId: to, amount: 100n } },
    };
    /** Calls twice with one key; the second answer is the first, marked replayed. */
    const twice = async <T>(call: (key: string, options: CallOptions) => Promise<T>) => {
      const key = newKey();
      const first = await call(key, { headers: keyed(key) });
      let replayed: string | null = null;
      const again = await call(key, {
        headers: keyed(key),
        onHeader: (h) => {
          replayed = h.get("idempotent-replayed");
        },
      });
      expect(replayed).toBe("true");
      expect(again).toEqual(first);
      return first;
    };
    await twice((_, options) => client.createTransaction(transfer, options));
    await twice((_, options) => client.defundEntity({ entityId: from, amount: 100n }, options));
    const batch = await twice((key, options) =>
      client.createTransactions({ atomic: true, transactions: [{ idempotencyKey: `${key}-item`, transaction: transfer }] }, options),
    );
    expect(batch.succeeded).toBe(1);
    expect((await balances(from)).posted).toBe(0);
    expect((await balances(to)).posted).toBe(200);
  });
});

describe("identical keyed requests sent at once", () => {
  // Each pair spends the whole balance: the one that comes second must replay the first, never
  // be refused for the money the first moved.
  const pairs = 40;

  async function race(send: (from: string, to: string, key: string) => Promise<ApiResponse>, groupOf: (res: ApiResponse) => unknown) {
    const plans = await Promise.all(
      Array.from({ length: pairs }, async () => ({ from: await entity(100), to: await entity(), key: newKey() })),
    );
    const answers = await Promise.all(plans.map((p) => Promise.all([send(p.from, p.to, p.key), send(p.from, p.to, p.key)])));
    for (const [a, b] of answers) {
      expect([a.status, b.status], JSON.stringify([a.body, b.body])).toEqual([200, 200]);
      expect(groupOf(b)).toEqual(groupOf(a));
      expect([a, b].filter((r) => r.headers.get("idempotent-replayed") === "true").length).toBeLessThanOrEqual(1);
    }
    for (const p of plans) expect((await balances(p.from)).available).toBe(0);
    expect(await ledgerViolations(stack.sql, stack.account.account_id)).toEqual([]);
  }

  it("POST /transaction", async () => {
    await race(
      (from, to, key) =>
        stack.api.post("/transaction", { description: "race", amount: 100, status: "posted", account: { from, to } }, keyed(key)),
      (res) => res.body.transaction_group_id,
    );
  });

  it("POST /entity/defund", async () => {
    await race(
      (from, _to, key) => stack.api.post("/entity/defund", { entity_id: from, amount: 100 }, keyed(key)),
      (res) => res.body.transaction?.debit?.transaction_group_id,
    );
  });

  it("POST /transaction/batch, atomic", async () => {
    await race(
      (from, to, key) =>
        stack.api.post(
          "/transaction/batch",
          { atomic: true, transactions: [{ description: "race", amount: 100, status: "posted", account: { from, to } }] },
          keyed(key),
        ),
      (res) => res.body.results?.[0]?.transaction_group_id,
    );
  });
});
