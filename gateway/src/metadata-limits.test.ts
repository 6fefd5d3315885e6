import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { newId } from "@ledger/common";
import { startStack, type Stack } from "@ledger/e2e";

// Metadata limits (gateway/openapi.yaml, Metadata): at most 16 levels of nesting, 16 KiB of JSON
// and keys of at most 256 characters, refused with 400 at the REST edge (e2e/src/rest-input.handlers.test.ts,
// without a database) and by the ledger's own RPC handlers alike. Metadata stored before the limits
// existed must never break a read or an event.

let stack: Stack;

beforeAll(async () => {
  stack = await startStack({ notification: {} });
}, 60_000);
afterAll(async () => stack?.close());

/** `{"k":{"k":...1}}` with `depth` objects, as JSON text (built as text: no recursion anywhere). */
function nestedText(depth: number): string {
  return '{"k":'.repeat(depth - 1) + '{"k":1' + "}".repeat(depth);
}

function nested(depth: number): object {
  return JSON.parse(nestedText(depth)) as object;
}

async function counts() {
  const [row] = await stack.sql`
    select (select count(*) from entities where account_id = ${stack.account.account_id})::int as entities,
           (select count(*) from transaction_groups where account_id = ${stack.account.account_id})::int as groups`;
  return row;
}

async function newEntity(): Promise<string> {
  const res = await stack.api.post("/entity", { entity_name: "m", entity_type: "wallet" });
  expect(res.status).toBe(200);
  return res.body.entity.entity_id;
}

describe("REST edge", () => {
  it("accepts metadata 16 levels deep and returns it as given", async () => {
    const res = await stack.api.post("/entity", { entity_name: "deep", entity_type: "wallet", metadata: nested(16) });
    expect(res.status).toBe(200);
    expect(res.body.entity.metadata).toEqual(nested(16));
  });

  it('refuses a "__proto__" key at any level with 400 instead of dropping it, and stores nothing', async () => {
    const before = await counts();
    // JSON.parse makes "__proto__" an own key, as a client's body has it; an object literal would not.
    for (const text of ['{"__proto__":{"a":1},"b":2}', '{"a":{"b":[{"__proto__":1}]}}']) {
      const res = await stack.api.post("/entity", { entity_name: "p", entity_type: "wallet", metadata: JSON.parse(text) });
      expect(res.status).toBe(400);
      expect(res.body.status).toBe("error");
      expect(res.body.error.code).toBe("invalid_request");
      expect(res.body.error.message).toMatch(/__proto__/);
    }
    const after = await counts();
    expect(after!.entities).toBe(before!.entities);
  });
});

describe("RPC edge (Connect JSON straight to the ledger)", () => {
  async function rpc(method: string, body: string) {
    const res = await fetch(`${stack.ledgerUrl}/ledger.v1.LedgerService/${method}`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: stack.account.api_key },
      body,
    });
    return { status: res.status, body: (await res.json()) as { code: string; message: string } };
  }

  it("refuses metadata 51 to 60 levels deep with 400 and stores nothing", async () => {
    const before = await counts();
    const a = await newEntity();
    const b = await newEntity();
    for (let depth = 51; depth <= 60; depth++) {
      const entity = await rpc("CreateEntity", `{"entityName":"deep","entityType":"wallet","metadata":${nestedText(depth)}}`);
      expect(entity.status).toBe(400);
      expect(entity.body.code).toBe("invalid_argument");
      expect(entity.body.message).toMatch(/16 levels/);
      const transaction = await rpc(
        "CreateTransaction",
        `{"description":"d","transfer":{"fromEntityId":"${a}","toEntityId":"${b}","amount":"1"},"metadata":${nestedText(depth)}}`,
      );
      expect(transaction.status).toBe(400);
      expect(transaction.body.message).toMatch(/16 levels/);
    }
    for (const depth of [17, 30, 200]) {
      expect((await rpc("CreateEntity", `{"entityName":"deep","entityType":"wallet","metadata":${nestedText(depth)}}`)).status).toBe(400);
    }
    const after = await counts();
    expect(after!.entities).toBe(before!.entities + 2);
    expect(after!.groups).toBe(before!.groups);
  });

  it("refuses metadata over 16 KiB", async () => {
    const big = await rpc(
      "CreateEntity",
      JSON.stringify({ entityName: "big", entityType: "wallet", metadata: { note: "x".repeat(17 * 1024) } }),
    );
    expect(big.status).toBe(400);
    expect(big.body.message).toMatch(/16 KiB/);
  });
});

describe("metadata stored before the limits", () => {
  it("never breaks GET /entity, GET /entities, GET /transaction/group or the events of the group", async () => {
    const deep = nested(60);
    const entityId = await newEntity();
    const other = await newEntity();
    await stack.api.post("/entity/fund", { entity_id: entityId, amount: 100 });
    const created = await stack.api.post("/transaction", { description: "old", amount: 10, account: { from: entityId, to: other } });
    expect(created.status).toBe(200);
    const groupId = created.body.transaction_group_id as string;
    // As a row written before the limits existed would be.
    await stack.sql`update entities set metadata = ${stack.sql.json(deep as never)} where id = ${entityId}`;
    await stack.sql`update transaction_groups set metadata = ${stack.sql.json(deep as never)} where id = ${groupId}`;

    const marker = { metadata_omitted: expect.stringMatching(/16 levels/) };
    const entity = await stack.api.get("/entity", { entity_id: entityId });
    expect(entity.status).toBe(200);
    expect(entity.body.entity.metadata).toEqual(marker);
    const page = await stack.api.get("/entities", { limit: "100" });
    expect(page.status).toBe(200);
    expect(page.body.entities.find((e: { entity_id: string }) => e.entity_id === entityId).metadata).toEqual(marker);
    const group = await stack.api.get("/transaction/group", { transaction_group_id: groupId });
    expect(group.status).toBe(200);
    expect(group.body.transaction_group.metadata).toEqual(marker);

    // Posting and reversing it emit events carrying that metadata; the notification service stores them.
    expect((await stack.api.post("/transaction/post", { transaction_group_id: groupId })).status).toBe(200);
    const reversed = await stack.api.post("/transaction/reverse", { transaction_group_id: groupId });
    expect(reversed.status).toBe(200);
    const reversal = reversed.body.reversal_transaction_group_id as string;
    const storedEvents = async () =>
      stack.notificationSql!<{ type: string; body: string }[]>`
        select type, body from events where account_id = ${stack.account.account_id}
          and (body::json -> 'data' ->> 'transaction_group_id') in (${groupId}, ${reversal})`;
    await expect.poll(async () => (await storedEvents()).length).toBe(4);
    const types = (await storedEvents()).map((e) => e.type).sort();
    expect(types).toEqual(["transaction.created", "transaction.created", "transaction.posted", "transaction.reversed"]);
    // transaction.created of the original group was emitted before its metadata was replaced.
    const metadataOf = (e: { body: string }) => (JSON.parse(e.body) as { data: { metadata: unknown } }).data.metadata;
    const withMarker = (await storedEvents()).filter((e) => JSON.stringify(metadataOf(e)) !== "{}");
    expect(withMarker).toHaveLength(3);
    for (const e of withMarker) expect(metadataOf(e)).toEqual(marker);
    const events = await stack.api.get("/events", { limit: "100" });
    expect(events.status).toBe(200);
  }, 60_000);

  it("never breaks GET /event for an event the notification service stored with deep metadata", async () => {
    // Events with metadata up to 49 levels could be decoded and stored before the limit; the
    // event API wraps that data in more messages than protobuf decodes.
    const id = newId("event");
    const body = `{"id":"${id}","type":"transaction.created","created":0,"data":{"transaction_group_id":"g","metadata":${nestedText(49)}}}`;
    await stack.notificationSql!`
      insert into events (id, account_id, type, body, created_at) values (${id}, ${stack.account.account_id}, 'transaction.created', ${body}, now())`;
    const res = await stack.api.get("/event", { id });
    expect(res.status).toBe(200);
    expect(res.body.event.data).toEqual({ transaction_group_id: "g", metadata: { metadata_omitted: expect.stringMatching(/16 levels/) } });
    expect((await stack.api.get("/events", { limit: "100" })).status).toBe(200);
  });
});
