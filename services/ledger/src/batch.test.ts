import { Code, ConnectError } from "@connectrpc/connect";
import { errorCodeOf } from "@ledger/common";
import { TransactionStatus } from "@ledger/proto/ledger/v1/ledger_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ledgerViolations, readStream, startStack, type Api, type Stack } from "@ledger/e2e";

// Batches (docs/api.md#batches): many transactions in one call, applied in request order as if
// sent one after the other, through REST and RPC, against a real Postgres and NATS.

let stack: Stack;
let api: Api;

beforeAll(async () => {
  stack = await startStack();
  api = stack.api;
});
afterAll(async () => stack?.close());

async function entity(name = "wallet", on: Api = api): Promise<string> {
  const res = await on.post("/entity", { entity_name: name, entity_type: "wallet" });
  expect(res.status).toBe(200);
  return res.body.entity.entity_id;
}

async function funded(amount: number, name = "wallet"): Promise<string> {
  const id = await entity(name);
  if (amount > 0) expect((await api.post("/entity/fund", { entity_id: id, amount })).status).toBe(200);
  return id;
}

async function posted(id: string): Promise<number> {
  const res = await api.get("/entity", { entity_id: id });
  expect(res.status).toBe(200);
  return res.body.entity.balances.posted;
}

/** This file's groups: the ledger's database is shared by every test file of the run. */
async function groupCount(): Promise<bigint> {
  const [row] = await stack.sql<
    { n: bigint }[]
  >`select count(*)::int8 as n from transaction_groups where account_id = ${stack.account.account_id}`;
  return row!.n;
}

const transfer = (from: string, to: string, amount: number, extra: Record<string, unknown> = {}) => ({
  description: "batch item",
  status: "posted",
  amount,
  account: { from, to },
  ...extra,
});

/** The `transaction.created` events on the stream, by group id. */
async function createdEvents(): Promise<Map<string, number>> {
  const counts = new Map<string, number>();
  for (const { event } of await readStream(stack.natsUrl, stack.stream)) {
    if (event.type !== "transaction.created" || event.data.case !== "transaction") continue;
    const id = event.data.value.transactionGroupId;
    counts.set(id, (counts.get(id) ?? 0) + 1);
  }
  return counts;
}

async function expectInvariants() {
  expect(await ledgerViolations(stack.sql, stack.account.account_id)).toEqual([]);
}

describe("POST /v1/transaction/batch", () => {
  it("applies items in order: an earlier credit funds a later debit, a refused item touches no neighbour", async () => {
    const a = await funded(0, "a");
    const b = await funded(100, "b");
    const c = await funded(0, "c");
    const d = await funded(0, "d");
    const res = await api.post("/transaction/batch", {
      transactions: [transfer(b, a, 50), transfer(a, c, 30), transfer(a, c, 30), transfer(c, d, 10)],
    });
    expect(res.status).toBe(200);
    expect(res.body.status).toBe("success");
    expect(res.body.succeeded).toBe(3);
    expect(res.body.failed).toBe(1);
    const [r0, r1, r2, r3] = res.body.results;
    expect(r0.status).toBe("success");
    expect(r0.replayed).toBe(false);
    expect(r0.transactions.map((leg: { entity_id: string }) => leg.entity_id)).toEqual([b, a]);
    expect(r1.status).toBe("success");
    expect(r2).toEqual({
      status: "error",
      error: {
        code: "insufficient_funds",
        message: expect.any(String),
        details: { entity_id: a, available: 20, required: 30, overdraft_limit: 0 },
      },
    });
    expect(r3.status).toBe("success");
    expect([await posted(a), await posted(b), await posted(c), await posted(d)]).toEqual([20, 50, 20, 10]);

    const ids = [r0, r1, r3].map((r) => r.transaction_group_id as string);
    expect(new Set(ids).size).toBe(3);
    await expect
      .poll(async () => {
        const events = await createdEvents();
        return ids.every((id) => events.get(id) === 1);
      })
      .toBe(true);
    await expectInvariants();
  });

  it("atomic: one refused item applies nothing and answers its error with details.index", async () => {
    const a = await funded(0, "a");
    const b = await funded(100, "b");
    const before = await groupCount();
    const res = await api.post("/transaction/batch", {
      atomic: true,
      transactions: [transfer(b, a, 50), transfer(a, b, 20), transfer(a, b, 40), transfer(b, a, 1)],
    });
    expect(res.status).toBe(422);
    expect(res.body.status).toBe("error");
    expect(res.body.error.code).toBe("insufficient_funds");
    expect(res.body.error.details).toMatchObject({ index: 2, entity_id: a, available: 30, required: 40 });
    expect(await groupCount()).toBe(before);
    expect([await posted(a), await posted(b)]).toEqual([0, 100]);

    // A malformed item (as the single call would refuse it) is refused in its place too.
    const malformed = await api.post("/transaction/batch", {
      atomic: true,
      transactions: [transfer(b, a, 5), transfer(b, a, 1.5)],
    });
    expect(malformed.status).toBe(400);
    expect(malformed.body.error.code).toBe("invalid_request");
    expect(malformed.body.error.details).toMatchObject({ index: 1, field: "amount" });
    expect(await groupCount()).toBe(before);

    const ok = await api.post("/transaction/batch", { atomic: true, transactions: [transfer(b, a, 50), transfer(a, b, 20)] });
    expect(ok.status).toBe(200);
    expect(ok.body.succeeded).toBe(2);
    expect([await posted(a), await posted(b)]).toEqual([30, 70]);
    await expectInvariants();
  });

  it("a malformed item is that item's invalid_request; its neighbours apply", async () => {
    const a = await funded(10, "a");
    const b = await funded(0, "b");
    const res = await api.post("/transaction/batch", {
      transactions: [transfer(a, b, 1), { ...transfer(a, b, 1), ammount: 3 }, transfer(a, b, 1, { status: "canceled" }), transfer(a, b, 1)],
    });
    expect(res.status).toBe(200);
    expect(res.body.results.map((r: { status: string; error?: { code: string } }) => r.error?.code ?? r.status)).toEqual([
      "success",
      "invalid_request",
      "invalid_request",
      "success",
    ]);
    expect(res.body.results[1].error.message).toMatch(/ammount/);
    expect(await posted(b)).toBe(2);
  });

  it("item keys: a repeat replays its first success and moves no money; another body is idempotency_conflict", async () => {
    const a = await funded(100, "a");
    const b = await funded(0, "b");
    const first = await api.post("/transaction/batch", {
      transactions: [transfer(a, b, 10, { idempotency_key: "pay-1" }), transfer(a, b, 10, { idempotency_key: "pay-1" })],
    });
    expect(first.status).toBe(200);
    const [one, again] = first.body.results;
    expect(one.replayed).toBe(false);
    expect(again).toMatchObject({ status: "success", replayed: true, transaction_group_id: one.transaction_group_id });
    expect(await posted(b)).toBe(10);

    const second = await api.post("/transaction/batch", {
      transactions: [transfer(a, b, 10, { idempotency_key: "pay-1" }), transfer(a, b, 11, { idempotency_key: "pay-1" }), transfer(a, b, 5)],
    });
    expect(second.status).toBe(200);
    expect(second.body.results[0]).toMatchObject({ status: "success", replayed: true, transaction_group_id: one.transaction_group_id });
    expect(second.body.results[1].error.code).toBe("idempotency_conflict");
    expect(second.body.results[2]).toMatchObject({ status: "success", replayed: false });
    expect(await posted(b)).toBe(15);

    // An item key and the single call's Idempotency-Key are one key space per account.
    const single = await api.post("/transaction", transfer(a, b, 7), { "idempotency-key": "single-1" });
    expect(single.status).toBe(200);
    const asItem = await api.post("/transaction/batch", { transactions: [transfer(a, b, 7, { idempotency_key: "single-1" })] });
    expect(asItem.body.results[0]).toMatchObject({ replayed: true, transaction_group_id: single.body.transaction_group_id });
    expect(await posted(b)).toBe(22);

    // A refused item stores nothing: once funded, the same key applies.
    const poor = await funded(0, "poor");
    const refused = await api.post("/transaction/batch", { transactions: [transfer(poor, b, 3, { idempotency_key: "later" })] });
    expect(refused.body.results[0].error.code).toBe("insufficient_funds");
    const retried = await api.post("/transaction/batch", {
      transactions: [transfer(a, poor, 3), transfer(poor, b, 3, { idempotency_key: "later" })],
    });
    expect(retried.body.results[1]).toMatchObject({ status: "success", replayed: false });
    await expectInvariants();
  });

  it("the request's Idempotency-Key replays the whole answer", async () => {
    const a = await funded(100, "a");
    const b = await funded(0, "b");
    const body = { transactions: [transfer(a, b, 10), transfer(a, b, 1000)] };
    const first = await api.post("/transaction/batch", body, { "idempotency-key": "whole-1" });
    expect(first.status).toBe(200);
    expect(first.headers.get("idempotent-replayed")).toBeNull();
    const again = await api.post("/transaction/batch", body, { "idempotency-key": "whole-1" });
    expect(again.status).toBe(200);
    expect(again.headers.get("idempotent-replayed")).toBe("true");
    expect(again.body).toEqual(first.body);
    expect(await posted(b)).toBe(10);
    const other = await api.post("/transaction/batch", { transactions: [transfer(a, b, 11)] }, { "idempotency-key": "whole-1" });
    expect(other.status).toBe(422);
    expect(other.body.error.code).toBe("idempotency_conflict");
  });

  it("another account's entity is that item's not_found", async () => {
    const other = await stack.newAccount("other");
    const theirs = await entity("theirs", other.api);
    const a = await funded(100, "a");
    const b = await funded(0, "b");
    const res = await api.post("/transaction/batch", { transactions: [transfer(a, theirs, 5), transfer(a, b, 5)] });
    expect(res.status).toBe(200);
    expect(res.body.results[0].error).toMatchObject({ code: "not_found", details: { id: theirs } });
    expect(res.body.results[1].status).toBe("success");
    expect(await posted(b)).toBe(5);
  });

  it("a 1,000-item batch: balances and events are exactly what the results say", async () => {
    const wallets = await Promise.all(Array.from({ length: 10 }, (_, i) => funded(i < 5 ? 500 : 0, `w${i}`)));
    const start = new Map<string, number>();
    for (const w of wallets) start.set(w, await posted(w));
    let seed = 7;
    const random = () => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed / 2 ** 31;
    };
    const items = Array.from({ length: 1000 }, (_, i) => {
      const from = wallets[Math.floor(random() * wallets.length)]!;
      let to = wallets[Math.floor(random() * wallets.length)]!;
      if (to === from) to = wallets[(wallets.indexOf(from) + 1) % wallets.length]!;
      return transfer(from, to, 1 + Math.floor(random() * 60), {
        idempotency_key: `big-${i}`,
        metadata: { order: `order-${i}`, note: "x".repeat(100) },
      });
    });
    const res = await api.post("/transaction/batch", { transactions: items });
    expect(res.status).toBe(200);
    expect(res.body.results).toHaveLength(1000);
    expect(res.body.succeeded + res.body.failed).toBe(1000);
    expect(res.body.failed).toBeGreaterThan(0);
    expect(res.body.succeeded).toBeGreaterThan(0);
    const expected = new Map(start);
    const ids: string[] = [];
    res.body.results.forEach((r: { status: string; transaction_group_id: string; error?: { code: string } }, i: number) => {
      if (r.status !== "success") {
        expect(r.error!.code).toBe("insufficient_funds");
        return;
      }
      const item = items[i]!;
      expected.set(item.account.from, expected.get(item.account.from)! - item.amount);
      expected.set(item.account.to, expected.get(item.account.to)! + item.amount);
      ids.push(r.transaction_group_id);
    });
    for (const w of wallets) expect(await posted(w)).toBe(expected.get(w));
    await expect
      .poll(
        async () => {
          const events = await createdEvents();
          return ids.every((id) => events.get(id) === 1);
        },
        { timeout: 30_000 },
      )
      .toBe(true);
    await expectInvariants();
  });
});

describe("LedgerService.CreateTransactions", () => {
  const rpcTransfer = (from: string, to: string, amount: bigint, idempotencyKey = "") => ({
    transaction: {
      description: "rpc item",
      status: TransactionStatus.POSTED,
      form: { case: "transfer" as const, value: { fromEntityId: from, toEntityId: to, amount } },
    },
    idempotencyKey,
  });

  it("answers per item in order, refuses atomic batches with details.index, and replays whole calls", async () => {
    const client = stack.ledgerClient(stack.account.api_key);
    const a = await funded(0, "a");
    const b = await funded(100, "b");
    const res = await client.createTransactions({
      transactions: [rpcTransfer(b, a, 40n), rpcTransfer(a, b, 50n), rpcTransfer(a, b, 40n, "rpc-1"), rpcTransfer(a, b, 40n, "rpc-1")],
    });
    expect(res.succeeded).toBe(3);
    expect(res.failed).toBe(1);
    expect(res.results.map((r) => r.result.case)).toEqual(["transactionGroup", "error", "transactionGroup", "transactionGroup"]);
    expect(res.results[1]!.result.value).toMatchObject({ code: "insufficient_funds" });
    expect(res.results[3]!.replayed).toBe(true);
    expect(res.results[3]!.result.value).toEqual(res.results[2]!.result.value);
    expect([await posted(a), await posted(b)]).toEqual([0, 100]);

    const before = await groupCount();
    const err = await client
      .createTransactions({ atomic: true, transactions: [rpcTransfer(b, a, 10n), rpcTransfer(a, b, 11n)] })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConnectError);
    expect((err as ConnectError).code).toBe(Code.FailedPrecondition);
    expect(errorCodeOf(err as ConnectError)).toMatchObject({ code: "insufficient_funds", details: { index: 1 } });
    expect(await groupCount()).toBe(before);

    const empty = await client.createTransactions({ transactions: [] }).catch((e: unknown) => e);
    expect((empty as ConnectError).code).toBe(Code.InvalidArgument);
    const tooMany = await client
      .createTransactions({ transactions: Array.from({ length: 1001 }, () => rpcTransfer(b, a, 1n)) })
      .catch((e: unknown) => e);
    expect((tooMany as ConnectError).code).toBe(Code.InvalidArgument);
    const blank = await client.createTransactions({ transactions: [{}] });
    expect(blank.results[0]!.result.value).toMatchObject({ code: "invalid_request" });
    expect(await groupCount()).toBe(before);

    let replayed = "";
    const call = { headers: { "idempotency-key": "rpc-whole" }, onHeader: (h: Headers) => (replayed = h.get("idempotent-replayed") ?? "") };
    const once = await client.createTransactions({ transactions: [rpcTransfer(b, a, 1n)] }, call);
    expect(replayed).toBe("");
    const twice = await client.createTransactions({ transactions: [rpcTransfer(b, a, 1n)] }, call);
    expect(replayed).toBe("true");
    expect(twice).toEqual(once);
    expect(await posted(a)).toBe(1);
    await expectInvariants();
  });
});
