import { Code, ConnectError } from "@connectrpc/connect";
import { errorCodeOf } from "@ledger/common";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ledgerViolations, startStack, type Api, type Stack } from "@ledger/e2e";

// The money rules of docs/architecture.md#money-rules-and-invariants, checked as properties against a real Postgres through
// the whole path (REST gateway, RPC, ledger). Every test ends by checking the ledger invariants.

let stack: Stack;
let api: Api;

beforeAll(async () => {
  stack = await startStack();
  api = stack.api;
});
afterAll(async () => stack?.close());

async function entity(name = "wallet"): Promise<string> {
  const res = await api.post("/entity", { entity_name: name, entity_type: "wallet" });
  expect(res.status).toBe(200);
  return res.body.entity.entity_id;
}

async function fund(entityId: string, amount: number) {
  const res = await api.post("/entity/fund", { entity_id: entityId, amount });
  expect(res.status).toBe(200);
}

async function balances(entityId: string) {
  const res = await api.get("/entity", { entity_id: entityId });
  expect(res.status).toBe(200);
  return res.body.entity.balances as { posted: number; pending_debits: number; pending_credits: number; held: number; available: number };
}

async function expectInvariants() {
  expect(await ledgerViolations(stack.sql, stack.account.account_id)).toEqual([]);
}

describe("money rules", () => {
  it("lets exactly 10 of 50 concurrent debits of 10 through against 100", async () => {
    const source = await entity("source");
    const sink = await entity("sink");
    await fund(source, 100);
    const results = await Promise.all(
      Array.from({ length: 50 }, () =>
        api.post("/transaction", { description: "race", amount: 10, status: "posted", account: { from: source, to: sink } }),
      ),
    );
    const ok = results.filter((r) => r.status === 200);
    const refused = results.filter((r) => r.status !== 200);
    expect(ok).toHaveLength(10);
    expect(refused).toHaveLength(40);
    for (const r of refused) {
      expect(r.status).toBe(422);
      expect(r.body.error.code).toBe("insufficient_funds");
      expect(r.body.error.details.required).toBe(10);
    }
    expect((await balances(source)).available).toBe(0);
    expect((await balances(sink)).posted).toBe(100);
    await expectInvariants();
  });

  it("keeps every sum at zero and no available below zero under random concurrent transfers", async () => {
    const ids = await Promise.all([entity("a"), entity("b"), entity("c"), entity("d")]);
    for (const id of ids) await fund(id, 500);
    let seed = 42;
    const random = (n: number) => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed % n;
    };
    const operations = Array.from({ length: 240 }, () => {
      const from = ids[random(ids.length)]!;
      let to = ids[random(ids.length)]!;
      if (to === from) to = ids[(ids.indexOf(from) + 1) % ids.length]!;
      return { from, to, amount: 1 + random(200), mode: random(4) };
    });
    let cursor = 0;
    const worker = async () => {
      while (cursor < operations.length) {
        const op = operations[cursor++]!;
        if (op.mode === 0) {
          // Multi-leg: the source pays two others.
          const third = ids.find((id) => id !== op.from && id !== op.to)!;
          await api.post("/transaction", {
            description: "split",
            status: "posted",
            entries: [
              { entity_id: op.from, direction: "debit", amount: op.amount * 2 },
              { entity_id: op.to, direction: "credit", amount: op.amount },
              { entity_id: third, direction: "credit", amount: op.amount },
            ],
          });
        } else {
          const created = await api.post("/transaction", {
            description: "random",
            amount: op.amount,
            status: op.mode === 1 ? "posted" : "pending",
            account: { from: op.from, to: op.to },
          });
          if (created.status === 200 && op.mode !== 1) {
            const action = op.mode === 2 ? "/transaction/post" : "/transaction/cancel";
            await api.post(action, { transaction_group_id: created.body.transaction_group_id });
          }
        }
      }
    };
    await Promise.all(Array.from({ length: 16 }, worker));
    await expectInvariants();
    let total = 0;
    for (const id of ids) {
      const b = await balances(id);
      expect(b.available).toBeGreaterThanOrEqual(0);
      total += b.posted;
    }
    expect(total).toBe(2000);
  });

  it("lowers available for a pending debit but not for a pending credit; cancel restores, post moves", async () => {
    const payer = await entity("payer");
    const payee = await entity("payee");
    await fund(payer, 1000);
    const pending = await api.post("/transaction", { description: "pending", amount: 300, account: { from: payer, to: payee } });
    expect(pending.status).toBe(200);
    expect(pending.body.transactions.map((l: { status: string }) => l.status)).toEqual(["pending", "pending"]);
    expect(await balances(payer)).toMatchObject({ posted: 1000, pending_debits: 300, available: 700 });
    expect(await balances(payee)).toMatchObject({ posted: 0, pending_credits: 300, available: 0 });

    const canceled = await api.post("/transaction/cancel", { transaction_group_id: pending.body.transaction_group_id });
    expect(canceled.status).toBe(200);
    expect(canceled.body.transaction_group.status).toBe("canceled");
    expect(await balances(payer)).toMatchObject({ posted: 1000, pending_debits: 0, available: 1000 });
    expect(await balances(payee)).toMatchObject({ posted: 0, pending_credits: 0, available: 0 });

    const second = await api.post("/transaction", { description: "pending", amount: 400, account: { from: payer, to: payee } });
    const posted = await api.post("/transaction/post", { transaction_group_id: second.body.transaction_group_id });
    expect(posted.status).toBe(200);
    expect(posted.body.transaction_group.status).toBe("posted");
    expect(posted.body.transaction_group.legs.every((l: { status: string }) => l.status === "posted")).toBe(true);
    expect(await balances(payer)).toMatchObject({ posted: 600, pending_debits: 0, available: 600 });
    expect(await balances(payee)).toMatchObject({ posted: 400, pending_credits: 0, available: 400 });

    // A pending debit counts against what later debits may spend.
    await api.post("/transaction", { description: "hold most", amount: 550, account: { from: payer, to: payee } });
    const tooMuch = await api.post("/transaction", {
      description: "over",
      amount: 100,
      status: "posted",
      account: { from: payer, to: payee },
    });
    expect(tooMuch.status).toBe(422);
    expect(tooMuch.body.error).toMatchObject({ code: "insufficient_funds", details: { available: 50, required: 100 } });
    await expectInvariants();
  });

  it("reverses a posted group with every leg flipped, and refuses to reverse it twice", async () => {
    const a = await entity("a");
    const b = await entity("b");
    const c = await entity("c");
    await fund(a, 900);
    const original = await api.post("/transaction", {
      description: "three ways",
      status: "posted",
      entries: [
        { entity_id: a, direction: "debit", amount: 600 },
        { entity_id: b, direction: "credit", amount: 250 },
        { entity_id: c, direction: "credit", amount: 350 },
      ],
    });
    expect(original.status).toBe(200);
    const groupId = original.body.transaction_group_id;
    const reversed = await api.post("/transaction/reverse", { transaction_group_id: groupId });
    expect(reversed.status).toBe(200);
    expect(reversed.body.transaction_group.status).toBe("reversed");
    const reversalId = reversed.body.reversal_transaction_group_id;
    expect(reversed.body.transaction_group.reversed_by_transaction_group_id).toBe(reversalId);

    const reversal = await api.get("/transaction/group", { transaction_group_id: reversalId });
    expect(reversal.body.transaction_group.status).toBe("posted");
    expect(reversal.body.transaction_group.reverses_transaction_group_id).toBe(groupId);
    const flipped = reversal.body.transaction_group.legs.map((l: { entity_id: string; direction: string; amount: number }) => [
      l.entity_id,
      l.direction,
      l.amount,
    ]);
    expect(flipped).toEqual([
      [a, "credit", 600],
      [b, "debit", 250],
      [c, "debit", 350],
    ]);
    expect((await balances(a)).posted).toBe(900);
    expect((await balances(b)).posted).toBe(0);
    expect((await balances(c)).posted).toBe(0);

    const again = await api.post("/transaction/reverse", { transaction_group_id: groupId });
    expect(again.status).toBe(422);
    expect(again.body.error.code).toBe("invalid_state");
    await expectInvariants();
  });

  it("refuses a reversal that would overdraw an entity that has spent the money", async () => {
    const a = await entity("a");
    const b = await entity("b");
    const c = await entity("c");
    await fund(a, 100);
    const paid = await api.post("/transaction", { description: "pay", amount: 100, status: "posted", account: { from: a, to: b } });
    await api.post("/transaction", { description: "spend", amount: 80, status: "posted", account: { from: b, to: c } });
    const reverse = await api.post("/transaction/reverse", { transaction_group_id: paid.body.transaction_group_id });
    expect(reverse.status).toBe(422);
    expect(reverse.body.error.code).toBe("insufficient_funds");
    const group = await api.get("/transaction/group", { transaction_group_id: paid.body.transaction_group_id });
    expect(group.body.transaction_group.status).toBe("posted");
    await expectInvariants();
  });

  it("fails and disputes with reasons, and answers invalid_state for transitions from the wrong state", async () => {
    const a = await entity("a");
    const b = await entity("b");
    await fund(a, 100);
    const pending = await api.post("/transaction", { description: "p", amount: 40, account: { from: a, to: b } });
    const failed = await api.post("/transaction/fail", {
      transaction_group_id: pending.body.transaction_group_id,
      reason: "card declined",
    });
    expect(failed.status).toBe(200);
    expect(failed.body.transaction_group).toMatchObject({ status: "failed", reason: "card declined" });
    expect((await balances(a)).available).toBe(100);
    for (const action of ["post", "cancel", "fail", "reverse", "dispute"]) {
      const res = await api.post(`/transaction/${action}`, { transaction_group_id: pending.body.transaction_group_id });
      expect(res.status, action).toBe(422);
      expect(res.body.error.code, action).toBe("invalid_state");
    }
    const posted = await api.post("/transaction", { description: "p", amount: 10, status: "posted", account: { from: a, to: b } });
    const disputed = await api.post("/transaction/dispute", { transaction_group_id: posted.body.transaction_group_id, reason: "not me" });
    expect(disputed.status).toBe(200);
    expect(disputed.body.transaction_group).toMatchObject({ status: "posted", disputed: true, reason: "not me" });
    expect((await api.post("/transaction/dispute", { transaction_group_id: posted.body.transaction_group_id })).status).toBe(422);
    await expectInvariants();
  });

  it("lets the external entity go negative and keeps the program's sum at zero through deposits and withdrawals", async () => {
    const a = await entity("a");
    await fund(a, 700);
    const defund = await api.post("/entity/defund", { entity_id: a, amount: 200 });
    expect(defund.status).toBe(200);
    expect(defund.body.transaction.debit).toMatchObject({ amount: 200, direction: "debit", status: "posted", entity_id: a });
    const over = await api.post("/entity/defund", { entity_id: a, amount: 501 });
    expect(over.status).toBe(422);
    expect(over.body.error.code).toBe("insufficient_funds");
    const program = await api.get("/program");
    const external = await api.get("/entity", { entity_id: program.body.program.external_entity_id });
    expect(external.body.entity.is_external).toBe(true);
    expect(external.body.entity.balances.posted).toBeLessThan(0);
    await expectInvariants();
  });

  it("refuses a group whose entities do not share one currency", async () => {
    const usd = await entity("usd");
    const eur = (await api.post("/entity", { entity_name: "eur", entity_type: "wallet", currency_code: "EUR" })).body.entity;
    expect(eur.currency_code).toBe("EUR");
    await fund(usd, 100);
    await fund(eur.entity_id, 100);
    const mixed = await api.post("/transaction", {
      description: "fx",
      amount: 10,
      status: "posted",
      account: { from: usd, to: eur.entity_id },
    });
    expect(mixed.status).toBe(422);
    expect(mixed.body.error.code).toBe("currency_mismatch");
    await expectInvariants();
  });

  it("moves money over RPC exactly as over REST", async () => {
    const client = stack.ledgerClient(stack.account.api_key);
    const a = await client.createEntity({ entityName: "rpc a", entityType: "wallet" });
    const b = await client.createEntity({ entityName: "rpc b", entityType: "wallet" });
    await client.fundEntity({ entityId: a.entity!.entityId, amount: 50n });
    const res = await client.createTransaction({
      description: "rpc",
      form: { case: "transfer", value: { fromEntityId: a.entity!.entityId, toEntityId: b.entity!.entityId, amount: 20n } },
    });
    expect(res.transactionGroup!.legs.map((l) => l.amount)).toEqual([20n, 20n]);
    const read = await client.getEntity({ entityId: a.entity!.entityId });
    expect(read.entity!.balances).toMatchObject({ posted: 50n, pendingDebits: 20n, available: 30n });
    await expectInvariants();
  });
});

// An entity's overdraft limit lets it spend below zero, down to minus the limit
// (docs/architecture.md#money-rules-and-invariants).
describe("overdraft limits", () => {
  async function transfer(from: string, to: string, amount: number, status = "posted") {
    return api.post("/transaction", { description: "overdraft", amount, status, account: { from, to } });
  }

  it("is 0 unless set, and must be an integer from 0 to 2^53-1", async () => {
    const plain = await api.post("/entity", { entity_name: "plain", entity_type: "wallet" });
    expect(plain.body.entity.overdraft_limit).toBe(0);
    const largest = await api.post("/entity", { entity_name: "max", entity_type: "wallet", overdraft_limit: Number.MAX_SAFE_INTEGER });
    expect(largest.status).toBe(200);
    expect(largest.body.entity.overdraft_limit).toBe(Number.MAX_SAFE_INTEGER);
    for (const bad of [-1, 1.5, "50", 2 ** 53, true]) {
      const res = await api.post("/entity", { entity_name: "bad", entity_type: "wallet", overdraft_limit: bad });
      expect(res.status, JSON.stringify(bad)).toBe(400);
      expect(res.body.error.code).toBe("invalid_request");
      expect(res.body.error.details).toEqual({ field: "overdraft_limit" });
    }
    const client = stack.ledgerClient(stack.account.api_key);
    const rpc = await client.createEntity({ entityName: "rpc", entityType: "wallet", overdraftLimit: 70n });
    expect(rpc.entity!.overdraftLimit).toBe(70n);
    expect((await client.getEntity({ entityId: rpc.entity!.entityId })).entity!.overdraftLimit).toBe(70n);
    for (const bad of [-1n, 2n ** 53n]) {
      const err = await client.createEntity({ entityName: "rpc", entityType: "wallet", overdraftLimit: bad }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ConnectError);
      expect((err as ConnectError).code).toBe(Code.InvalidArgument);
    }
  });

  it("lets debits take available to exactly minus the limit and refuses one unit more, pending, posted and withdrawn", async () => {
    const res = await api.post("/entity", { entity_name: "credit line", entity_type: "wallet", overdraft_limit: 50 });
    const a = res.body.entity.entity_id as string;
    const b = await entity("payee");
    await fund(a, 30);
    const tooMuch = await transfer(a, b, 81);
    expect(tooMuch.status).toBe(422);
    expect(tooMuch.body.error).toMatchObject({
      code: "insufficient_funds",
      details: { entity_id: a, available: 30, required: 81, overdraft_limit: 50 },
    });
    expect((await transfer(a, b, 60, "pending")).status).toBe(200);
    expect((await api.post("/entity/defund", { entity_id: a, amount: 20 })).status).toBe(200);
    expect(await balances(a)).toMatchObject({ posted: 10, pending_debits: 60, available: -50 });
    for (const again of [
      await transfer(a, b, 1),
      await transfer(a, b, 1, "pending"),
      await api.post("/entity/defund", { entity_id: a, amount: 1 }),
    ]) {
      expect(again.status).toBe(422);
      expect(again.body.error.details).toEqual({ entity_id: a, available: -50, required: 1, overdraft_limit: 50 });
    }
    // A credit still lands on an overdrawn entity.
    await fund(b, 5);
    expect((await transfer(b, a, 5)).status).toBe(200);
    expect((await balances(a)).available).toBe(-45);
    await expectInvariants();
  });

  it("is backed by the database: a write that takes available below minus the limit fails, a lowered limit does not", async () => {
    const res = await api.post("/entity", { entity_name: "backstop", entity_type: "wallet", overdraft_limit: 50 });
    const a = res.body.entity.entity_id as string;
    const b = await entity("payee");
    expect((await transfer(a, b, 50)).status).toBe(200);
    const below = await stack.sql`update entities set posted = posted - 1 where id = ${a}`.catch((e: unknown) => e);
    expect(below).toMatchObject({ code: "23514", constraint_name: "ordinary_entity_not_overdrawn" });
    // Lowering the limit below what is used is allowed; the entity then spends nothing more.
    await stack.sql`update entities set overdraft_limit = 10 where id = ${a}`;
    expect((await transfer(a, b, 1)).body.error.details).toEqual({ entity_id: a, available: -50, required: 1, overdraft_limit: 10 });
    expect((await transfer(b, a, 30)).status).toBe(200);
    expect((await transfer(a, b, 1)).status).toBe(422);
    expect((await transfer(b, a, 15)).status).toBe(200);
    expect((await transfer(a, b, 5)).status).toBe(200);
    expect((await balances(a)).available).toBe(-10);
    await expectInvariants();
  });
});

// Every balance stays within ±(2^53-1), the largest integer a JSON number carries exactly. Each
// test has an account of its own, so its program's external entity starts at zero: one deposit of
// the largest amount takes it to the bound.
describe("balances at the bound, ±(2^53-1)", () => {
  const MAX = Number.MAX_SAFE_INTEGER;

  async function freshAccount() {
    const { account, api: own } = await stack.newAccount();
    const create = async (name: string) => {
      const res = await own.post("/entity", { entity_name: name, entity_type: "wallet" });
      expect(res.status).toBe(200);
      return res.body.entity.entity_id as string;
    };
    const externalId = (await own.get("/program")).body.program.external_entity_id as string;
    const balancesOf = async (id: string) => (await own.get("/entity", { entity_id: id })).body.entity.balances;
    return { account, api: own, create, externalId, balancesOf };
  }

  async function stored(accountId: string) {
    return stack.sql<{ id: string; posted: bigint; pending_debits: bigint; pending_credits: bigint; held: bigint }[]>`
      select id, posted, pending_debits, pending_credits, held from entities where account_id = ${accountId} order by id`;
  }

  async function groups(accountId: string) {
    const [row] = await stack.sql<{ n: number }[]>`select count(*)::int as n from transaction_groups where account_id = ${accountId}`;
    return row!.n;
  }

  function expectOutOfRange(
    res: { status: number; body: { error: { code: string; message: string; details?: unknown } } },
    entityId: string,
    balance = "posted",
  ) {
    expect(res.status, JSON.stringify(res.body)).toBe(422);
    expect(res.body.error.code).toBe("balance_out_of_range");
    expect(res.body.error.details).toEqual({ entity_id: entityId, balance, limit: MAX });
    expect(res.body.error.message).toContain(entityId);
  }

  it("takes deposits up to exactly 2^53-1 (the external entity at -(2^53-1)) and refuses one cent more, changing nothing", async () => {
    const { account, api: own, create, externalId, balancesOf } = await freshAccount();
    const a = await create("a");
    const b = await create("b");
    expect((await own.post("/entity/fund", { entity_id: a, amount: MAX })).status).toBe(200);
    expect(await balancesOf(a)).toEqual({ posted: MAX, pending_debits: 0, pending_credits: 0, held: 0, available: MAX });
    expect(await balancesOf(externalId)).toMatchObject({ posted: -MAX, available: -MAX });
    const before = await stored(account.account_id);
    const groupsBefore = await groups(account.account_id);

    // The program's deposits are at the bound: one cent more, into any entity, is refused.
    expectOutOfRange(await own.post("/entity/fund", { entity_id: b, amount: 1 }), externalId);
    expectOutOfRange(await own.post("/entity/fund", { entity_id: a, amount: 1 }), externalId);
    // So is a transaction that pays out of the external entity, alone and as a batch item.
    const fromExternal = {
      description: "from outside",
      status: "posted",
      entries: [
        { entity_id: externalId, direction: "debit", amount: 1 },
        { entity_id: b, direction: "credit", amount: 1 },
      ],
    };
    expectOutOfRange(await own.post("/transaction", fromExternal), externalId);
    const batch = await own.post("/transaction/batch", {
      transactions: [fromExternal, { description: "fits", status: "posted", amount: 5, account: { from: a, to: b } }],
    });
    expect(batch.status).toBe(200);
    expect(batch.body.results[0]).toEqual({
      status: "error",
      error: {
        code: "balance_out_of_range",
        message: expect.any(String),
        details: { entity_id: externalId, balance: "posted", limit: MAX },
      },
    });
    expect(batch.body.results[1].status).toBe("success");
    const atomic = await own.post("/transaction/batch", {
      atomic: true,
      transactions: [{ description: "fits", status: "posted", amount: 5, account: { from: a, to: b } }, fromExternal],
    });
    expect(atomic.status).toBe(422);
    expect(atomic.body.error).toMatchObject({ code: "balance_out_of_range", details: { index: 1, entity_id: externalId, limit: MAX } });

    // Nothing changed but the one batch item that fitted.
    const after = await stored(account.account_id);
    expect(after.find((e) => e.id === externalId)).toEqual(before.find((e) => e.id === externalId));
    expect(await groups(account.account_id)).toBe(groupsBefore + 1);
    expect([(await balancesOf(a)).posted, (await balancesOf(b)).posted]).toEqual([MAX - 5, 5]);

    // A withdrawal makes room for a deposit of the same size again.
    expect((await own.post("/entity/defund", { entity_id: a, amount: 1 })).status).toBe(200);
    expect((await own.post("/entity/fund", { entity_id: b, amount: 1 })).status).toBe(200);
    expect(await balancesOf(externalId)).toMatchObject({ posted: -MAX });
    expect(await ledgerViolations(stack.sql, account.account_id)).toEqual([]);
  });

  it("over RPC: a deposit past the bound is failed_precondition balance_out_of_range, an amount past 2^53-1 invalid_argument", async () => {
    const { account } = await freshAccount();
    const client = stack.ledgerClient(account.api_key);
    const a = (await client.createEntity({ entityName: "rpc", entityType: "wallet" })).entity!.entityId;
    const refusal = (p: Promise<unknown>) =>
      p.then(
        () => undefined,
        (err: unknown) => ConnectError.from(err),
      );

    const tooLarge = await refusal(client.fundEntity({ entityId: a, amount: BigInt(MAX) + 1n }));
    expect(tooLarge?.code).toBe(Code.InvalidArgument);
    expect(errorCodeOf(tooLarge!).code).toBe("invalid_request");

    await client.fundEntity({ entityId: a, amount: BigInt(MAX) });
    const past = await refusal(client.fundEntity({ entityId: a, amount: 1n }));
    expect(past?.code).toBe(Code.FailedPrecondition);
    expect(errorCodeOf(past!)).toMatchObject({ code: "balance_out_of_range", details: { balance: "posted", limit: MAX } });
    expect((await client.getEntity({ entityId: a })).entity!.balances!.posted).toBe(BigInt(MAX));
  });

  it("refuses a transfer, a deposit, a posting and a hold's capture that would take the receiver past 2^53-1", async () => {
    // A ledger whose deposits are all accounted for cannot get a receiver there (its entities
    // share the program's deposits); one whose rows were written otherwise still must not pass it.
    const { account, api: own, create, balancesOf } = await freshAccount();
    const a = await create("a");
    const b = await create("b");
    expect((await own.post("/entity/fund", { entity_id: a, amount: 1_000 })).status).toBe(200);
    const pending = await own.post("/transaction", { description: "later", amount: 100, account: { from: a, to: b } });
    expect(pending.status).toBe(200);
    const hold = await own.post("/hold", { entity_id: a, amount: 100 });
    expect(hold.status).toBe(200);
    await stack.sql`update entities set posted = ${MAX - 50} where id = ${b}`;
    const before = await stored(account.account_id);
    const groupsBefore = await groups(account.account_id);

    const transfer = { description: "over", amount: 100, status: "posted", account: { from: a, to: b } };
    expectOutOfRange(await own.post("/transaction", transfer), b);
    expectOutOfRange(await own.post("/entity/fund", { entity_id: b, amount: 100 }), b);
    expectOutOfRange(await own.post("/transaction/post", { transaction_group_id: pending.body.transaction_group_id }), b);
    expectOutOfRange(await own.post("/hold/capture", { hold_id: hold.body.hold.hold_id, amount: 100, destination_entity_id: b }), b);
    const item = await own.post("/transaction/batch", { transactions: [transfer] });
    expect(item.body.results[0].error).toMatchObject({ code: "balance_out_of_range", details: { entity_id: b, balance: "posted" } });

    expect(await stored(account.account_id)).toEqual(before);
    expect(await groups(account.account_id)).toBe(groupsBefore);
    expect((await own.get("/hold", { hold_id: hold.body.hold.hold_id })).body.hold).toMatchObject({ status: "held", captured_amount: 0 });
    // Up to the bound still works.
    expect((await own.post("/transaction", { ...transfer, amount: 50 })).status).toBe(200);
    expect((await balancesOf(b)).posted).toBe(MAX);
  });

  it("holds all of a balance at the bound and captures it", async () => {
    const { account, api: own, create, balancesOf } = await freshAccount();
    const a = await create("a");
    const b = await create("b");
    expect((await own.post("/entity/fund", { entity_id: a, amount: MAX })).status).toBe(200);
    const hold = await own.post("/hold", { entity_id: a, amount: MAX });
    expect(hold.status).toBe(200);
    expect(await balancesOf(a)).toEqual({ posted: MAX, pending_debits: 0, pending_credits: 0, held: MAX, available: 0 });
    const capture = await own.post("/hold/capture", { hold_id: hold.body.hold.hold_id, amount: MAX, destination_entity_id: b });
    expect(capture.status).toBe(200);
    expect([await balancesOf(a), await balancesOf(b)]).toEqual([
      { posted: 0, pending_debits: 0, pending_credits: 0, held: 0, available: 0 },
      { posted: MAX, pending_debits: 0, pending_credits: 0, held: 0, available: MAX },
    ]);
    expect(await ledgerViolations(stack.sql, account.account_id)).toEqual([]);
  });

  it("answers 422 when another process's deposits took the external entity near the bound, and fails no other command", async () => {
    const { account, api: own, create, externalId } = await freshAccount();
    const a = await create("a");
    const b = await create("b");
    // This process learns the external entity's balance from its own deposit: -10.
    expect((await own.post("/entity/fund", { entity_id: a, amount: 10 })).status).toBe(200);
    // Another ledger process deposits almost all the program may hold; this one does not see it.
    const replica = await stack.startLedgerReplica();
    try {
      await stack.ledgerClient(account.api_key, replica.server.url).fundEntity({ entityId: a, amount: BigInt(MAX - 60) });
    } finally {
      await replica.close();
    }
    const before = await stored(account.account_id);

    const [over, transfer] = await Promise.all([
      own.post("/entity/fund", { entity_id: b, amount: 100 }),
      own.post("/transaction", { description: "ok", amount: 5, status: "posted", account: { from: a, to: b } }),
    ]);
    expect(over.status).toBe(422);
    expect(over.body.error.code).toBe("balance_out_of_range");
    expect(over.body.error.details).toMatchObject({ limit: MAX });
    expect(transfer.status).toBe(200);

    const after = await stored(account.account_id);
    expect(after.find((e) => e.id === externalId)).toEqual(before.find((e) => e.id === externalId));
    // What still fits goes through.
    expect((await own.post("/entity/fund", { entity_id: b, amount: 50 })).status).toBe(200);
    expect(await ledgerViolations(stack.sql, account.account_id)).toEqual([]);
  });
});
