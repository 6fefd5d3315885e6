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

// Balances are int64 (Postgres bigint). Seeding them near the edge in SQL stands in for the
// thousand deposits of 2^53-1 it takes to get there; the seeded accounts are not the stack's, so
// the invariant checks of the tests above are not disturbed.
describe("balances at the edge of int64", () => {
  const MAX_INT64 = 2n ** 63n - 1n;
  const MIN_INT64 = -(2n ** 63n);

  async function freshAccount() {
    const { account, api: own } = await stack.newAccount();
    const create = async (name: string) => {
      const res = await own.post("/entity", { entity_name: name, entity_type: "wallet" });
      expect(res.status).toBe(200);
      return res.body.entity.entity_id as string;
    };
    const externalId = (await own.get("/program")).body.program.external_entity_id as string;
    return { account, api: own, create, externalId };
  }

  async function stored(accountId: string) {
    return stack.sql<{ id: string; posted: bigint; pending_debits: bigint; pending_credits: bigint; held: bigint }[]>`
      select id, posted, pending_debits, pending_credits, held from entities where account_id = ${accountId} order by id`;
  }

  async function groups(accountId: string) {
    const [row] = await stack.sql<{ n: number }[]>`select count(*)::int as n from transaction_groups where account_id = ${accountId}`;
    return row!.n;
  }

  function expectOutOfRange(res: { status: number; body: { error: { code: string; message: string } } }, entityId: string) {
    expect(res.status).toBe(422);
    expect(res.body.error.code).toBe("balance_out_of_range");
    expect(res.body.error.message).toContain(entityId);
  }

  it("refuses a credit that would take an ordinary entity above 2^63-1, by transfer, deposit and posting", async () => {
    const { account, api: own, create } = await freshAccount();
    const a = await create("a");
    const b = await create("b");
    expect((await own.post("/entity/fund", { entity_id: a, amount: 1_000 })).status).toBe(200);
    const pending = await own.post("/transaction", { description: "later", amount: 100, account: { from: a, to: b } });
    expect(pending.status).toBe(200);
    await stack.sql`update entities set posted = ${MAX_INT64 - 50n} where id = ${b}`;
    const before = await stored(account.account_id);
    const groupsBefore = await groups(account.account_id);

    expectOutOfRange(
      await own.post("/transaction", { description: "over", amount: 100, status: "posted", account: { from: a, to: b } }),
      b,
    );
    expectOutOfRange(await own.post("/entity/fund", { entity_id: b, amount: 100 }), b);
    expectOutOfRange(await own.post("/transaction/post", { transaction_group_id: pending.body.transaction_group_id }), b);

    expect(await stored(account.account_id)).toEqual(before);
    expect(await groups(account.account_id)).toBe(groupsBefore);
    // Within range still works.
    expect(
      (await own.post("/transaction", { description: "fits", amount: 50, status: "posted", account: { from: a, to: b } })).status,
    ).toBe(200);
  });

  it("refuses a deposit that would take the external entity below -2^63", async () => {
    const { account, api: own, create, externalId } = await freshAccount();
    const a = await create("a");
    await stack.sql`update entities set posted = ${MIN_INT64 + 50n} where id = ${externalId}`;
    const before = await stored(account.account_id);

    expectOutOfRange(await own.post("/entity/fund", { entity_id: a, amount: 100 }), externalId);

    expect(await stored(account.account_id)).toEqual(before);
    expect(await groups(account.account_id)).toBe(0);
    // Exactly -2^63 fits; one more does not, and the ledger knows from its own last write.
    expect((await own.post("/entity/fund", { entity_id: a, amount: 50 })).status).toBe(200);
    expectOutOfRange(await own.post("/entity/fund", { entity_id: a, amount: 1 }), externalId);
    const [external] = await stack.sql<{ posted: bigint }[]>`select posted from entities where id = ${externalId}`;
    expect(external!.posted).toBe(MIN_INT64);
  });

  it("answers 422 even when the database is the one to find the overflow, and fails no other command", async () => {
    const { account, api: own, create, externalId } = await freshAccount();
    const a = await create("a");
    const b = await create("b");
    // The ledger now knows this external entity's balance as 0; it changes behind its back.
    expect((await own.post("/entity/fund", { entity_id: a, amount: 10 })).status).toBe(200);
    await stack.sql`update entities set posted = ${MIN_INT64 + 50n} where id = ${externalId}`;
    const before = await stored(account.account_id);

    const [over, transfer] = await Promise.all([
      own.post("/entity/fund", { entity_id: b, amount: 100 }),
      own.post("/transaction", { description: "ok", amount: 5, status: "posted", account: { from: a, to: b } }),
    ]);
    expect(over.status).toBe(422);
    expect(over.body.error.code).toBe("balance_out_of_range");
    expect(transfer.status).toBe(200);

    const after = await stored(account.account_id);
    expect(after.find((e) => e.id === externalId)).toEqual(before.find((e) => e.id === externalId));
  });
});
