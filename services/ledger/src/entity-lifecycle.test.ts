import { Code, ConnectError } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ledgerViolations, startStack, type Api, type Stack } from "@ledger/e2e";

// An entity over time (docs/api.md#entities-over-time): updates of its name, type, metadata and
// overdraft limit, each with its entity.updated event; over REST and RPC, on a real Postgres and NATS.

let stack: Stack;
let api: Api;

beforeAll(async () => {
  stack = await startStack({ notification: {} });
  api = stack.api;
});
afterAll(async () => stack?.close());

async function entity(body: Record<string, unknown> = {}): Promise<string> {
  const res = await api.post("/entity", { entity_name: "wallet", entity_type: "wallet", ...body });
  expect(res.status).toBe(200);
  return res.body.entity.entity_id;
}

/** The data of every entity.updated event of `entityId` the notification service has stored, oldest first. */
async function entityEvents(entityId: string, count: number): Promise<Array<Record<string, unknown>>> {
  let found: Array<{ event_id: string }> = [];
  await expect
    .poll(
      async () => {
        const res = await api.get("/events", { limit: "100" });
        found = res.body.events.filter((e: { type: string }) => e.type === "entity.updated");
        const data = await Promise.all(found.map(async (e) => (await api.get("/event", { id: e.event_id })).body.event.data));
        found = found.filter((_, i) => data[i].entity_id === entityId);
        return found.length;
      },
      { timeout: 15_000 },
    )
    .toBe(count);
  const events = await Promise.all(found.map(async (e) => (await api.get("/event", { id: e.event_id })).body.event));
  return events.reverse().map((e) => e.data);
}

describe("PUT /entity", () => {
  it("merges metadata key by key, removes a key sent as null, and changes name, type and limit", async () => {
    const id = await entity({ metadata: { tier: "gold", region: "eu", nested: { a: 1 } } });
    const res = await api.put("/entity", {
      entity_id: id,
      entity_name: "renamed",
      metadata: { region: null, nested: { b: 2 }, added: true },
      overdraft_limit: 25,
    });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body.status).toBe("success");
    expect(res.body.entity).toMatchObject({
      entity_id: id,
      entity_name: "renamed",
      entity_type: "wallet",
      metadata: { tier: "gold", nested: { b: 2 }, added: true },
      overdraft_limit: 25,
      status: "active",
    });
    expect(res.body.entity.metadata).not.toHaveProperty("region");
    const type = await api.put("/entity", { entity_id: id, entity_type: "savings", metadata: { tier: null, nested: null, added: null } });
    expect(type.body.entity).toMatchObject({ entity_name: "renamed", entity_type: "savings", metadata: {}, overdraft_limit: 25 });
    expect((await api.get("/entity", { entity_id: id })).body.entity).toEqual(type.body.entity);

    const events = await entityEvents(id, 2);
    expect(events[0]).toMatchObject({ entity_id: id, program_id: res.body.entity.program_id, entity_name: "renamed", overdraft_limit: 25 });
    expect(events[1]).toEqual(type.body.entity);
  });

  it("answers 400 for a body with nothing to change or a bad field, and changes nothing", async () => {
    const id = await entity({ metadata: { keep: 1 } });
    for (const body of [
      { entity_id: id },
      { entity_id: id, metadata: {} },
      { entity_id: id, entity_name: null },
      { entity_id: id, entity_name: "" },
      { entity_id: id, overdraft_limit: -1 },
      { entity_id: id, overdraft_limit: 2 ** 53 },
      { entity_id: id, metadata: "x" },
      { entity_id: id, status: "frozen" },
      { entity_name: "no id" },
    ]) {
      const res = await api.put("/entity", body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.body.error.code).toBe("invalid_request");
    }
    const after = (await api.get("/entity", { entity_id: id })).body.entity;
    expect(after).toMatchObject({ entity_name: "wallet", metadata: { keep: 1 }, overdraft_limit: 0 });
  });

  it("refuses merged metadata past the size limit", async () => {
    const id = await entity({ metadata: { a: "x".repeat(9000) } });
    const res = await api.put("/entity", { entity_id: id, metadata: { b: "y".repeat(9000) } });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe("invalid_request");
    expect(Object.keys((await api.get("/entity", { entity_id: id })).body.entity.metadata)).toEqual(["a"]);
  });

  it("lets the external entity take a name and metadata only", async () => {
    const external = (await api.get("/program")).body.program.external_entity_id as string;
    const named = await api.put("/entity", { entity_id: external, entity_name: "world", metadata: { note: "outside" } });
    expect(named.status).toBe(200);
    expect(named.body.entity).toMatchObject({ entity_name: "world", metadata: { note: "outside" }, is_external: true });
    for (const body of [
      { entity_id: external, entity_type: "other" },
      { entity_id: external, overdraft_limit: 5 },
    ]) {
      const res = await api.put("/entity", body);
      expect(res.status).toBe(422);
      expect(res.body.error.code).toBe("invalid_state");
    }
  });

  it("answers 404 for another account's entity and changes nothing", async () => {
    const id = await entity();
    const { api: other } = await stack.newAccount();
    const res = await other.put("/entity", { entity_id: id, entity_name: "stolen" });
    expect(res.status).toBe(404);
    expect(res.body.error.code).toBe("not_found");
    expect((await other.put("/entity", { entity_id: "ent_nope", entity_name: "x" })).status).toBe(404);
    expect((await api.get("/entity", { entity_id: id })).body.entity.entity_name).toBe("wallet");
  });

  it("lowers a limit below what is used: the entity keeps its balance and debits nothing more until credited", async () => {
    const a = await entity({ overdraft_limit: 100 });
    const b = await entity();
    const pay = (from: string, to: string, amount: number) =>
      api.post("/transaction", { description: "t", amount, status: "posted", account: { from, to } });
    expect((await pay(a, b, 80)).status).toBe(200);
    const lowered = await api.put("/entity", { entity_id: a, overdraft_limit: 30 });
    expect(lowered.status).toBe(200);
    expect(lowered.body.entity).toMatchObject({ overdraft_limit: 30, balances: { available: -80 } });
    const refused = await pay(a, b, 1);
    expect(refused.status).toBe(422);
    expect(refused.body.error.details).toEqual({ entity_id: a, available: -80, required: 1, overdraft_limit: 30 });
    expect((await pay(b, a, 60)).status).toBe(200);
    expect((await pay(a, b, 10)).status).toBe(200);
    expect((await pay(a, b, 1)).status).toBe(422);
    expect(await ledgerViolations(stack.sql, stack.account.account_id)).toEqual([]);
  });

  it("a cached batch resting on the row before the change goes stale: a lowered limit refuses the next debit", async () => {
    // Debits warm the ledger's cache of both rows; the update then changes the row's version, so
    // the next debit cannot be applied to the cached row with the old limit.
    const a = await entity({ overdraft_limit: 1000 });
    const b = await entity();
    for (let i = 0; i < 3; i++) {
      expect((await api.post("/transaction", { description: "t", amount: 10, status: "posted", account: { from: a, to: b } })).status).toBe(
        200,
      );
    }
    expect((await api.put("/entity", { entity_id: a, overdraft_limit: 30 })).status).toBe(200);
    const res = await api.post("/transaction", { description: "t", amount: 1, status: "posted", account: { from: a, to: b } });
    expect(res.status).toBe(422);
    expect(res.body.error.details).toMatchObject({ available: -30, overdraft_limit: 30 });
  });
});

describe("UpdateEntity (RPC)", () => {
  it("updates as REST does, with unset fields left alone and null metadata values removing keys", async () => {
    const client = stack.ledgerClient(stack.account.api_key);
    const created = await client.createEntity({ entityName: "rpc", entityType: "wallet", metadata: { a: 1, b: 2 } });
    const entityId = created.entity!.entityId;
    const res = await client.updateEntity({ entityId, metadata: { a: null, c: "x" }, overdraftLimit: 7n });
    expect(res.entity).toMatchObject({ entityName: "rpc", entityType: "wallet", metadata: { b: 2, c: "x" }, overdraftLimit: 7n });
    const renamed = await client.updateEntity({ entityId, entityName: "again" });
    expect(renamed.entity).toMatchObject({ entityName: "again", metadata: { b: 2, c: "x" }, overdraftLimit: 7n });
    const zero = await client.updateEntity({ entityId, overdraftLimit: 0n });
    expect(zero.entity!.overdraftLimit).toBe(0n);
    const nothing = await client.updateEntity({ entityId }).catch((e: unknown) => e);
    expect(nothing).toBeInstanceOf(ConnectError);
    expect((nothing as ConnectError).code).toBe(Code.InvalidArgument);
  });
});

describe("freeze, unfreeze and close", () => {
  const pay = (from: string, to: string, amount: number, status = "posted") =>
    api.post("/transaction", { description: "t", amount, status, account: { from, to } });

  function expectRefused(res: { status: number; body: { error: { code: string; details?: unknown } } }, code: string, id: string) {
    expect(res.status, JSON.stringify(res.body)).toBe(422);
    expect(res.body.error.code).toBe(code);
    expect(res.body.error.details).toEqual({ entity_id: id });
  }

  it("a frozen entity refuses every new debit and still takes credits and the settlement of what was in flight", async () => {
    const a = await entity();
    const b = await entity();
    await api.post("/entity/fund", { entity_id: a, amount: 1000 });
    await api.post("/entity/fund", { entity_id: b, amount: 1000 });
    const toPost = (await pay(a, b, 10, "pending")).body.transaction_group_id;
    const toCancel = (await pay(a, b, 20, "pending")).body.transaction_group_id;
    const toFail = (await pay(a, b, 30, "pending")).body.transaction_group_id;
    const credit = (await pay(b, a, 40, "pending")).body.transaction_group_id;
    const received = (await pay(b, a, 50)).body.transaction_group_id;
    const capture = (await api.post("/hold", { entity_id: a, amount: 60 })).body.hold.hold_id;
    const release = (await api.post("/hold", { entity_id: a, amount: 70 })).body.hold.hold_id;
    const expire = (await api.post("/hold", { entity_id: a, amount: 80, expires_at: new Date(Date.now() + 2_000).toISOString() })).body.hold
      .hold_id;

    const frozen = await api.post("/entity/freeze", { entity_id: a, reason: "card reported stolen" });
    expect(frozen.status, JSON.stringify(frozen.body)).toBe(200);
    expect(frozen.body.entity).toMatchObject({ entity_id: a, status: "frozen", status_reason: "card reported stolen" });
    const before = (await api.get("/entity", { entity_id: a })).body.entity.balances;

    expectRefused(await pay(a, b, 1), "entity_frozen", a);
    expectRefused(await pay(a, b, 1, "pending"), "entity_frozen", a);
    expectRefused(
      await api.post("/transaction", {
        description: "entries",
        status: "posted",
        entries: [
          { entity_id: a, direction: "debit", amount: 1 },
          { entity_id: b, direction: "credit", amount: 1 },
        ],
      }),
      "entity_frozen",
      a,
    );
    expectRefused(await api.post("/entity/defund", { entity_id: a, amount: 1 }), "entity_frozen", a);
    expectRefused(await api.post("/transaction/reverse", { transaction_group_id: received }), "entity_frozen", a);
    const hold = await api.post("/hold", { entity_id: a, amount: 1 });
    expect(hold.status, JSON.stringify(hold.body)).toBe(422);
    expect(hold.body.error.code).toBe("entity_frozen");
    const batch = await api.post("/transaction/batch", {
      transactions: [
        { description: "x", amount: 1, status: "posted", account: { from: a, to: b } },
        { description: "y", amount: 1, status: "posted", account: { from: b, to: a } },
      ],
    });
    expect(batch.status).toBe(200);
    expect(batch.body.results[0].error).toMatchObject({ code: "entity_frozen", details: { entity_id: a } });
    expect(batch.body.results[1].status).toBe("success");
    expect((await api.get("/entity", { entity_id: a })).body.entity.balances).toEqual({
      ...before,
      posted: before.posted + 1,
      available: before.available + 1,
    });

    expect((await api.post("/entity/fund", { entity_id: a, amount: 5 })).status).toBe(200);
    expect((await pay(b, a, 5)).status).toBe(200);
    expect((await api.post("/transaction/post", { transaction_group_id: toPost })).status).toBe(200);
    expect((await api.post("/transaction/cancel", { transaction_group_id: toCancel })).status).toBe(200);
    expect((await api.post("/transaction/fail", { transaction_group_id: toFail, reason: "x" })).status).toBe(200);
    expect((await api.post("/transaction/post", { transaction_group_id: credit })).status).toBe(200);
    expect((await api.post("/hold/capture", { hold_id: capture, amount: 60, destination_entity_id: b })).status).toBe(200);
    expect((await api.post("/hold/release", { hold_id: release })).status).toBe(200);
    await expect.poll(async () => (await api.get("/hold", { hold_id: expire })).body.hold.status, { timeout: 10_000 }).toBe("released");
    expect((await api.get("/entity", { entity_id: a })).body.entity.balances).toMatchObject({ pending_debits: 0, held: 0 });

    expect((await api.post("/entity/freeze", { entity_id: a })).body.error.code).toBe("invalid_state");
    const active = await api.post("/entity/unfreeze", { entity_id: a });
    expect(active.body.entity).toMatchObject({ status: "active", status_reason: "" });
    expect((await api.post("/entity/unfreeze", { entity_id: a })).body.error.code).toBe("invalid_state");
    expect((await pay(a, b, 1)).status).toBe(200);
    expect(await ledgerViolations(stack.sql, stack.account.account_id)).toEqual([]);
  });

  it("closes only an entity whose balances are all zero, and closed is final", async () => {
    const x = await entity();
    const y = await entity();
    await api.post("/entity/fund", { entity_id: y, amount: 100 });
    const notEmpty = async (balances: Record<string, number>) => {
      const res = await api.post("/entity/close", { entity_id: x });
      expect(res.status).toBe(422);
      expect(res.body.error).toMatchObject({
        code: "entity_not_empty",
        details: { entity_id: x, posted: 0, pending_debits: 0, pending_credits: 0, held: 0, ...balances },
      });
    };
    await api.post("/entity/fund", { entity_id: x, amount: 10 });
    await notEmpty({ posted: 10 });
    const out = (await pay(x, y, 10, "pending")).body.transaction_group_id;
    await notEmpty({ posted: 10, pending_debits: 10 });
    await api.post("/transaction/post", { transaction_group_id: out });
    const incoming = (await pay(y, x, 5, "pending")).body.transaction_group_id;
    await notEmpty({ pending_credits: 5 });
    await api.post("/transaction/cancel", { transaction_group_id: incoming });
    await api.post("/entity/fund", { entity_id: x, amount: 3 });
    const hold = (await api.post("/hold", { entity_id: x, amount: 3 })).body.hold.hold_id;
    await notEmpty({ posted: 3, held: 3 });
    await api.post("/hold/capture", { hold_id: hold, amount: 3, destination_entity_id: y });

    expect((await api.post("/entity/freeze", { entity_id: x })).status).toBe(200);
    const closed = await api.post("/entity/close", { entity_id: x });
    expect(closed.status, JSON.stringify(closed.body)).toBe(200);
    expect(closed.body.entity).toMatchObject({ entity_id: x, status: "closed" });

    expectRefused(await api.post("/entity/fund", { entity_id: x, amount: 1 }), "entity_closed", x);
    expectRefused(await pay(y, x, 1), "entity_closed", x);
    expectRefused(await pay(y, x, 1, "pending"), "entity_closed", x);
    expectRefused(await pay(x, y, 1), "entity_closed", x);
    expect((await api.post("/hold", { entity_id: x, amount: 1 })).body.error.code).toBe("entity_closed");
    for (const step of ["freeze", "unfreeze", "close"]) {
      const res = await api.post(`/entity/${step}`, { entity_id: x });
      expect(res.status).toBe(422);
      expect(res.body.error).toMatchObject({ code: "invalid_state", details: { status: "closed" } });
    }
    expect((await api.get("/entity", { entity_id: x })).body.entity.status).toBe("closed");
    const listed = (await api.get("/entities", { limit: "100" })).body.entities.find((e: { entity_id: string }) => e.entity_id === x);
    expect(listed.status).toBe("closed");
    expect(await ledgerViolations(stack.sql, stack.account.account_id)).toEqual([]);
  });

  it("never freezes or closes the external entity, and another account's entity is not found", async () => {
    const external = (await api.get("/program")).body.program.external_entity_id as string;
    for (const step of ["freeze", "unfreeze", "close"]) {
      const res = await api.post(`/entity/${step}`, { entity_id: external });
      expect(res.status).toBe(422);
      expect(res.body.error.code).toBe("invalid_state");
    }
    const id = await entity();
    const { api: other } = await stack.newAccount();
    for (const step of ["freeze", "unfreeze", "close"]) {
      expect((await other.post(`/entity/${step}`, { entity_id: id })).status).toBe(404);
    }
    expect((await api.get("/entity", { entity_id: id })).body.entity.status).toBe("active");
  });

  it("emits entity.updated for freeze, unfreeze and close, with the entity after each", async () => {
    const id = await entity();
    const steps = [
      await api.post("/entity/freeze", { entity_id: id, reason: "review" }),
      await api.post("/entity/unfreeze", { entity_id: id }),
      await api.post("/entity/close", { entity_id: id }),
    ];
    const events = await entityEvents(id, 3);
    expect(events).toEqual(steps.map((s) => s.body.entity));
    expect(events.map((e) => e["status"])).toEqual(["frozen", "active", "closed"]);
  });

  it("is refused by the database too: a write that lowers a frozen entity's available, or moves a closed entity's money", async () => {
    const a = await entity();
    await api.post("/entity/fund", { entity_id: a, amount: 10 });
    await api.post("/entity/freeze", { entity_id: a });
    await expect(stack.sql`update entities set posted = posted - 1 where id = ${a}`).rejects.toMatchObject({
      constraint_name: "frozen_entity_not_debited",
    });
    const c = await entity();
    await api.post("/entity/close", { entity_id: c });
    await expect(stack.sql`update entities set posted = 1 where id = ${c}`).rejects.toMatchObject({
      constraint_name: "closed_entity_is_empty",
    });
  });

  it("over RPC: FreezeEntity, UnfreezeEntity and CloseEntity, with the same rules", async () => {
    const client = stack.ledgerClient(stack.account.api_key);
    const entityId = (await client.createEntity({ entityName: "rpc", entityType: "wallet" })).entity!.entityId;
    await client.fundEntity({ entityId, amount: 5n });
    expect((await client.freezeEntity({ entityId, reason: "r" })).entity).toMatchObject({ status: 2, statusReason: "r" });
    const refused = await client.defundEntity({ entityId, amount: 1n }).catch((e: unknown) => e);
    expect((refused as ConnectError).code).toBe(Code.FailedPrecondition);
    expect((await client.unfreezeEntity({ entityId })).entity!.status).toBe(1);
    await client.defundEntity({ entityId, amount: 5n });
    expect((await client.closeEntity({ entityId })).entity!.status).toBe(3);
    const again = await client.freezeEntity({ entityId }).catch((e: unknown) => e);
    expect((again as ConnectError).code).toBe(Code.FailedPrecondition);
  });

  it("a freeze racing a stream of debits: no debit commits after the freeze, and every refusal comes from the rules", async () => {
    const a = await entity();
    const b = await entity();
    await api.post("/entity/fund", { entity_id: a, amount: 100_000 });
    let frozenAt = 0;
    const after: Array<{ status: number; body: { error?: { code: string; details?: unknown } } }> = [];
    let accepted = 0;
    const debitor = async () => {
      for (let i = 0; i < 60; i++) {
        const sentAt = Date.now();
        const res = await pay(a, b, 1);
        if (res.status === 200) accepted++;
        else {
          expect(res.body.error.code).toBe("entity_frozen");
          // From the money rules, with the entity named, not from the database's backstop.
          expect(res.body.error.details).toEqual({ entity_id: a });
        }
        if (frozenAt > 0 && sentAt > frozenAt) after.push(res);
      }
    };
    const freezer = async () => {
      await new Promise((resolve) => setTimeout(resolve, 150));
      expect((await api.post("/entity/freeze", { entity_id: a })).status).toBe(200);
      frozenAt = Date.now();
    };
    await Promise.all([debitor(), debitor(), debitor(), debitor(), freezer()]);
    expect(frozenAt).toBeGreaterThan(0);
    expect(after.length).toBeGreaterThan(0);
    for (const res of after) expect(res.status).toBe(422);
    // By commit order: writes of the entity's row take turns under its lock, so the transaction
    // that wrote its current version committed last. Every debit writes a group in the
    // transaction that writes the row; the freeze writes none. So the last writer wrote no group.
    const [last] = await stack.sql<{ n: number }[]>`
      select count(*)::int as n from entities e join transaction_groups g on g.xmin = e.xmin where e.id = ${a}`;
    expect(last!.n).toBe(0);
    expect((await api.get("/entity", { entity_id: a })).body.entity.balances.posted).toBe(100_000 - accepted);
    expect(await ledgerViolations(stack.sql, stack.account.account_id)).toEqual([]);
  });

  it("a close racing a credit: either the close or the credit is refused, never both applied", async () => {
    for (let round = 0; round < 10; round++) {
      const x = await entity();
      const [closed, credited] = await Promise.all([
        api.post("/entity/close", { entity_id: x }),
        api.post("/entity/fund", { entity_id: x, amount: 7 }),
      ]);
      const row = (await api.get("/entity", { entity_id: x })).body.entity;
      if (closed.status === 200) {
        expect(credited.status).toBe(422);
        expect(credited.body.error.code).toBe("entity_closed");
        expect(row).toMatchObject({ status: "closed", balances: { posted: 0 } });
      } else {
        expect(closed.body.error.code).toBe("entity_not_empty");
        expect(credited.status).toBe(200);
        expect(row).toMatchObject({ status: "active", balances: { posted: 7 } });
      }
    }
    expect(await ledgerViolations(stack.sql, stack.account.account_id)).toEqual([]);
  });
});
