import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ledgerViolations, startStack, type Api, type Stack } from "@ledger/e2e";

// Every REST endpoint of the ledger through the gateway: the success shape, the documented errors,
// tenancy, idempotency and pagination. Bad input refused before any storage is reached is
// e2e/src/rest-input.handlers.test.ts, which needs no database.

let stack: Stack;
let api: Api;

beforeAll(async () => {
  stack = await startStack();
  api = stack.api;
});
afterAll(async () => stack?.close());

async function newEntity(extra: Record<string, unknown> = {}) {
  const res = await api.post("/entity", { entity_name: "Wallet", entity_type: "customer", ...extra });
  expect(res.status).toBe(200);
  return res.body.entity.entity_id as string;
}

async function funded(amount: number) {
  const id = await newEntity();
  expect((await api.post("/entity/fund", { entity_id: id, amount })).status).toBe(200);
  return id;
}

async function snapshot(...ids: string[]) {
  return Promise.all(ids.map(async (id) => (await api.get("/entity", { entity_id: id })).body.entity.balances));
}

function expectError(
  res: { status: number; body: { status: string; error: { code: string; message: string } } },
  status: number,
  code: string,
) {
  expect(res.status).toBe(status);
  expect(res.body.status).toBe("error");
  expect(res.body.error.code).toBe(code);
  expect(typeof res.body.error.message).toBe("string");
  expect(JSON.stringify(res.body)).not.toMatch(/select |insert |update |postgres|at .*\.ts:\d+/i);
}

describe("entities", () => {
  it("creates an entity with the documented fields and reads it back with balances", async () => {
    const res = await api.post("/entity", { entity_name: "Alice", entity_type: "customer", metadata: { tier: "gold", n: 3 } });
    expect(res.status).toBe(200);
    expect(res.body.status).toBe("success");
    expect(res.body.entity).toMatchObject({
      status: "active",
      entity_name: "Alice",
      entity_type: "customer",
      currency_code: "USD",
      metadata: { tier: "gold", n: 3 },
    });
    expect(res.body.entity.entity_id).toMatch(/^ent_[0-9a-z]{26}$/);
    const read = await api.get("/entity", { entity_id: res.body.entity.entity_id });
    expect(read.body).toMatchObject({
      status: "success",
      entity: {
        entity_id: res.body.entity.entity_id,
        balances: { posted: 0, pending_debits: 0, pending_credits: 0, held: 0, available: 0 },
      },
    });
  });

  it("lists entities newest first, filters by type, and walks pages exactly once", async () => {
    const type = `page-${Date.now()}`;
    const created: string[] = [];
    for (let i = 0; i < 7; i++) created.push(await newEntity({ entity_type: type }));
    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const res: Awaited<ReturnType<Api["get"]>> = await api.get("/entities", {
        entity_type: type,
        limit: "3",
        ...(cursor ? { cursor } : {}),
      });
      expect(res.status).toBe(200);
      expect(res.body.pagination.limit).toBe(3);
      seen.push(...res.body.entities.map((e: { entity_id: string }) => e.entity_id));
      cursor = res.body.pagination.next_cursor;
      expect(res.body.pagination.has_next).toBe(cursor !== null);
      // Inserts while paging must neither repeat nor skip what was there.
      await newEntity({ entity_type: "noise" });
    } while (cursor);
    expect(seen).toEqual([...created].reverse());
  });

  it("funds with a posted credit and defunds with a posted debit", async () => {
    const id = await newEntity();
    const fund = await api.post("/entity/fund", { entity_id: id, amount: 2500, description: "top up" });
    expect(fund.body).toMatchObject({
      status: "success",
      transaction: { credit: { amount: 2500, status: "posted", direction: "credit", entity_id: id } },
    });
    expect(fund.body.transaction.credit.transaction_id).toMatch(/^trx_/);
    expect(fund.body.transaction.credit.transaction_group_id).toMatch(/^trx-grp_/);
    const defund = await api.post("/entity/defund", { entity_id: id, amount: 500 });
    expect(defund.body.status).toBe("success");
    expect((await snapshot(id))[0]).toMatchObject({ posted: 2000, available: 2000 });
  });
});

describe("transactions", () => {
  it("creates two-party and multi-leg transactions and retrieves legs and groups", async () => {
    const a = await funded(1000);
    const b = await newEntity();
    const two = await api.post("/transaction", { description: "rent", amount: 300, account: { from: a, to: b }, metadata: { ref: "r1" } });
    expect(two.status).toBe(200);
    expect(two.body.transaction_group_id).toMatch(/^trx-grp_/);
    expect(two.body.transactions).toHaveLength(2);
    expect(two.body.transactions[0]).toMatchObject({ amount: 300, status: "pending", direction: "debit", entity_id: a });
    expect(two.body.transactions[1]).toMatchObject({ amount: 300, status: "pending", direction: "credit", entity_id: b });

    const leg = await api.get("/transaction", { entity_id: a, transaction_id: two.body.transactions[0].transaction_id });
    expect(leg.body).toMatchObject({
      status: "success",
      transaction: { amount: 300, status: "pending", direction: "debit", transaction_group_id: two.body.transaction_group_id },
    });
    expect(leg.body.transaction.entity_id).toBeUndefined();

    const multi = await api.post("/transaction", {
      description: "split",
      status: "posted",
      entries: [
        { entity_id: a, direction: "debit", amount: 100 },
        { entity_id: b, direction: "credit", amount: 60 },
        { entity_id: b, direction: "credit", amount: 40 },
      ],
    });
    expect(multi.status).toBe(200);
    expect(multi.body.transactions.map((l: { status: string }) => l.status)).toEqual(["posted", "posted", "posted"]);

    const group = await api.get("/transaction/group", { transaction_group_id: two.body.transaction_group_id });
    expect(group.body.transaction_group).toMatchObject({
      status: "pending",
      description: "rent",
      metadata: { ref: "r1" },
      currency_code: "USD",
      amount: 300,
      disputed: false,
    });
    expect(group.body.transaction_group.legs).toHaveLength(2);

    const list = await api.get("/transactions", { entity_id: a, status: "posted" });
    expect(list.body.transactions.every((l: { status: string }) => l.status === "posted")).toBe(true);
    expect(list.body.transactions.map((l: { transaction_group_id: string }) => l.transaction_group_id)).toContain(
      multi.body.transaction_group_id,
    );
    expect(list.body.pagination).toMatchObject({ limit: 20, has_next: false, next_cursor: null });
  });

  it("refuses unbalanced entries with unbalanced_entries and changes nothing", async () => {
    const a = await funded(100);
    const b = await newEntity();
    const before = await snapshot(a, b);
    const res = await api.post("/transaction", {
      description: "bad",
      entries: [
        { entity_id: a, direction: "debit", amount: 10 },
        { entity_id: b, direction: "credit", amount: 9 },
      ],
    });
    expectError(res, 422, "unbalanced_entries");
    expect(await snapshot(a, b)).toEqual(before);
  });

  it("answers 404 for unknown and malformed ids", async () => {
    const a = await funded(100);
    expectError(await api.get("/entity", { entity_id: "ent_01m80ts8wm38j0zc0r0sgz6t61" }), 404, "not_found");
    expectError(await api.get("/entity", { entity_id: "nonsense" }), 404, "not_found");
    expectError(await api.get("/transaction", { entity_id: a, transaction_id: "trx_01m80ts8wm38j0zc0r0sgz6t61" }), 404, "not_found");
    expectError(await api.get("/transaction/group", { transaction_group_id: "trx-grp_x" }), 404, "not_found");
    expectError(await api.post("/transaction/post", { transaction_group_id: "trx-grp_01m80ts8wm38j0zc0r0sgz6t61" }), 404, "not_found");
    expectError(await api.post("/entity/fund", { entity_id: "ent_01m80ts8wm38j0zc0r0sgz6t61", amount: 5 }), 404, "not_found");
    expectError(
      await api.post("/transaction", { description: "x", amount: 5, account: { from: a, to: "ent_01m80ts8wm38j0zc0r0sgz6t61" } }),
      404,
      "not_found",
    );
    expect((await snapshot(a))[0].posted).toBe(100);
  });
});

describe("idempotency", () => {
  it("moves money once for a retried request and replays the first response", async () => {
    const a = await funded(1000);
    const b = await newEntity();
    const body = { description: "once", amount: 100, status: "posted", account: { from: a, to: b } };
    const key = { "idempotency-key": `k-${Date.now()}` };
    const results = await Promise.all([
      api.post("/transaction", body, key),
      api.post("/transaction", body, key),
      api.post("/transaction", body, key),
    ]);
    for (const r of results) expect(r.status).toBe(200);
    expect(new Set(results.map((r) => r.body.transaction_group_id)).size).toBe(1);
    expect(results.filter((r) => r.headers.get("idempotent-replayed") === "true")).toHaveLength(2);
    const later = await api.post("/transaction", body, key);
    expect(later.body).toEqual(results[0]!.body);
    expect(later.headers.get("idempotent-replayed")).toBe("true");
    expect((await snapshot(a))[0].posted).toBe(900);
  });

  it("answers 422 idempotency_conflict for the same key with another body", async () => {
    const a = await funded(1000);
    const key = { "idempotency-key": `c-${Date.now()}` };
    expect((await api.post("/entity/fund", { entity_id: a, amount: 5 }, key)).status).toBe(200);
    expectError(await api.post("/entity/fund", { entity_id: a, amount: 6 }, key), 422, "idempotency_conflict");
    expect((await snapshot(a))[0].posted).toBe(1005);
  });

  it("stores nothing for a refused request, so a retry with the same key is tried afresh", async () => {
    const a = await funded(10);
    const b = await newEntity();
    const key = { "idempotency-key": `r-${Date.now()}` };
    const body = { description: "retry", amount: 50, status: "posted", account: { from: a, to: b } };
    expectError(await api.post("/transaction", body, key), 422, "insufficient_funds");
    await api.post("/entity/fund", { entity_id: a, amount: 100 });
    const retried = await api.post("/transaction", body, key);
    expect(retried.status).toBe(200);
    expect(retried.headers.get("idempotent-replayed")).toBeNull();
  });
});

describe("programs", () => {
  it("creates, reads, lists and renames programs, and scopes entities by the program_id header", async () => {
    const created = await api.post("/program", { program_name: "Payouts", currency_code: "EUR" });
    expect(created.status).toBe(200);
    const program = created.body.program;
    expect(program).toMatchObject({ program_name: "Payouts", currency_code: "EUR", is_default: false });
    expect(program.program_id).toMatch(/^prg_/);
    expect(program.external_entity_id).toMatch(/^ent_/);
    const header = { program_id: program.program_id };

    const read = await api.get("/program", undefined, header);
    expect(read.body.program.program_id).toBe(program.program_id);
    const renamed = await api.put("/program", { program_name: "Payouts EU" }, header);
    expect(renamed.body).toMatchObject({ status: "success", program: { program_name: "Payouts EU" } });
    const list = await api.get("/programs");
    expect(list.body.programs.map((p: { program_id: string }) => p.program_id)).toContain(program.program_id);

    const inProgram = await api.post("/entity", { entity_name: "eu", entity_type: "w" }, header);
    expect(inProgram.body.entity.currency_code).toBe("EUR");
    // The same entity is not found in the default program.
    expectError(await api.get("/entity", { entity_id: inProgram.body.entity.entity_id }), 404, "not_found");
    expect((await api.get("/entity", { entity_id: inProgram.body.entity.entity_id }, header)).status).toBe(200);
    expectError(await api.get("/program", undefined, { program_id: "prg_01m80ts8wm38j0zc0r0sgz6t61" }), 404, "not_found");
  });
});

describe("tenancy", () => {
  it("hides one account's objects from another account's key, exactly as missing ones", async () => {
    const a = await funded(500);
    const b = await newEntity();
    const tx = await api.post("/transaction", { description: "mine", amount: 10, account: { from: a, to: b } });
    const { api: other } = await stack.newAccount("intruder");
    const otherEntity = (await other.post("/entity", { entity_name: "x", entity_type: "x" })).body.entity.entity_id;
    await other.post("/entity/fund", { entity_id: otherEntity, amount: 100 });
    const program = (await api.get("/program")).body.program.program_id;

    expectError(await other.get("/entity", { entity_id: a }), 404, "not_found");
    expectError(await other.get("/transactions", { entity_id: a }), 404, "not_found");
    expectError(
      await other.get("/transaction", { entity_id: a, transaction_id: tx.body.transactions[0].transaction_id }),
      404,
      "not_found",
    );
    expectError(await other.get("/transaction/group", { transaction_group_id: tx.body.transaction_group_id }), 404, "not_found");
    for (const action of ["post", "cancel", "fail", "reverse", "dispute"]) {
      expectError(await other.post(`/transaction/${action}`, { transaction_group_id: tx.body.transaction_group_id }), 404, "not_found");
    }
    expectError(await other.post("/entity/fund", { entity_id: a, amount: 1 }), 404, "not_found");
    expectError(await other.post("/entity/defund", { entity_id: a, amount: 1 }), 404, "not_found");
    expectError(
      await other.post("/transaction", { description: "steal", amount: 100, status: "posted", account: { from: a, to: otherEntity } }),
      404,
      "not_found",
    );
    expectError(await other.get("/program", undefined, { program_id: program }), 404, "not_found");
    expectError(await other.get("/entities", undefined, { program_id: program }), 404, "not_found");
    expect((await other.get("/entities")).body.entities.map((e: { entity_id: string }) => e.entity_id)).not.toContain(a);
    expect((await snapshot(a))[0]).toMatchObject({ posted: 500, pending_debits: 10 });
    expect(await ledgerViolations(stack.sql, stack.account.account_id)).toEqual([]);
  });
});
