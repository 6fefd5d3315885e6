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
