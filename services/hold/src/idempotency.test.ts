import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { expectHeldMatches, startStack, type Api, type Stack } from "@ledger/e2e";

// Every POST of the hold service (create, capture, release) goes through the one idempotency
// mechanism of packages/common/src/idempotency.ts: keys per account, for 24 hours, the same body
// replays the first success with Idempotent-Replayed, another body answers idempotency_conflict.

let stack: Stack;
let api: Api;

beforeAll(async () => {
  stack = await startStack();
  api = stack.api;
});
afterAll(async () => stack?.close());

let n = 0;
const key = (what: string) => ({ "idempotency-key": `${what}-${Date.now()}-${++n}` });

async function fundedEntity(amount: number): Promise<string> {
  const id = (await api.post("/entity", { entity_name: "w", entity_type: "wallet" })).body.entity.entity_id as string;
  if (amount > 0) await api.post("/entity/fund", { entity_id: id, amount });
  return id;
}

describe("hold idempotency", () => {
  it("replays a keyed release with its first answer instead of hold_not_active", async () => {
    const source = await fundedEntity(100);
    const holdId = (await api.post("/hold", { entity_id: source, amount: 40 })).body.hold.hold_id;
    const k = key("release");
    const first = await api.post("/hold/release", { hold_id: holdId }, k);
    expect(first.status).toBe(200);
    expect(first.headers.get("idempotent-replayed")).toBeNull();
    const again = await api.post("/hold/release", { hold_id: holdId }, k);
    expect(again.status).toBe(200);
    expect(again.headers.get("idempotent-replayed")).toBe("true");
    expect(again.body).toEqual(first.body);
    // Without the key, the second release is what it is: the hold is no longer active.
    expect((await api.post("/hold/release", { hold_id: holdId })).body.error.code).toBe("hold_not_active");
    await expectHeldMatches(stack);
  });

  it("answers 50 concurrent creates with one key with one hold, the same body, and all but one replayed", async () => {
    const source = await fundedEntity(1000);
    const k = key("burst");
    const answers = await Promise.all(Array.from({ length: 50 }, () => api.post("/hold", { entity_id: source, amount: 70 }, k)));
    expect(answers.map((a) => a.status)).toEqual(Array(50).fill(200));
    const bodies = new Set(answers.map((a) => JSON.stringify(a.body)));
    expect(bodies.size).toBe(1);
    expect(answers.filter((a) => a.headers.get("idempotent-replayed") === "true")).toHaveLength(49);
    const [count] = await stack.holdSql()<{ n: bigint }[]>`select count(*)::int8 as n from holds where entity_id = ${source}`;
    expect(count!.n).toBe(1n);
    const [entity] = await stack.sql<{ held: bigint }[]>`select held from entities where id = ${source}`;
    expect(entity!.held).toBe(70n);
    await expectHeldMatches(stack);
  });

  it("refuses a key reused with another body, on create, capture and release alike", async () => {
    const source = await fundedEntity(100);
    const sink = await fundedEntity(0);
    const create = key("create");
    const hold = (await api.post("/hold", { entity_id: source, amount: 30 }, create)).body.hold;
    const conflict = await api.post("/hold", { entity_id: source, amount: 31 }, create);
    expect(conflict.status).toBe(422);
    expect(conflict.body.error.code).toBe("idempotency_conflict");
    // The create's key on another operation is another request too.
    expect((await api.post("/hold/release", { hold_id: hold.hold_id }, create)).body.error.code).toBe("idempotency_conflict");
    const other = (await api.post("/hold", { entity_id: source, amount: 20 })).body.hold;

    // A capture's key belongs to the account, not to one hold: the same capture on another hold is another body.
    const capture = key("capture");
    const captured = await api.post("/hold/capture", { hold_id: hold.hold_id, amount: 10, destination_entity_id: sink }, capture);
    expect(captured.status).toBe(200);
    const elsewhere = await api.post("/hold/capture", { hold_id: other.hold_id, amount: 10, destination_entity_id: sink }, capture);
    expect(elsewhere.status).toBe(422);
    expect(elsewhere.body.error.code).toBe("idempotency_conflict");
    expect((await api.get("/hold", { hold_id: other.hold_id })).body.hold.captured_amount).toBe(0);

    const release = key("release");
    expect((await api.post("/hold/release", { hold_id: other.hold_id }, release)).status).toBe(200);
    expect((await api.post("/hold/release", { hold_id: hold.hold_id }, release)).body.error.code).toBe("idempotency_conflict");
    expect((await api.get("/hold", { hold_id: hold.hold_id })).body.hold.status).toBe("partially_captured");
    await expectHeldMatches(stack);
  });

  it("does not store a refusal: a retry with the key after the cause is fixed is tried afresh", async () => {
    const source = await fundedEntity(10);
    const k = key("refused");
    const short = await api.post("/hold", { entity_id: source, amount: 50 }, k);
    expect(short.body.error.code).toBe("insufficient_funds");
    await api.post("/entity/fund", { entity_id: source, amount: 40 });
    const retried = await api.post("/hold", { entity_id: source, amount: 50 }, k);
    expect(retried.status).toBe(200);
    expect(retried.headers.get("idempotent-replayed")).toBeNull();
    await expectHeldMatches(stack);
  });

  it("forgets a key after 24 hours: the same key makes a new hold", async () => {
    const source = await fundedEntity(100);
    const k = key("old");
    const first = (await api.post("/hold", { entity_id: source, amount: 10 }, k)).body.hold;
    const replay = await api.post("/hold", { entity_id: source, amount: 10 }, k);
    expect(replay.body.hold.hold_id).toBe(first.hold_id);
    await stack.holdSql()`update idempotency_keys set created_at = now() - interval '24 hours 1 minute' where key = ${k["idempotency-key"]}`;
    const fresh = await api.post("/hold", { entity_id: source, amount: 10 }, k);
    expect(fresh.status).toBe(200);
    expect(fresh.headers.get("idempotent-replayed")).toBeNull();
    expect(fresh.body.hold.hold_id).not.toBe(first.hold_id);
    // And another body is no conflict once the key is forgotten.
    await stack.holdSql()`update idempotency_keys set created_at = now() - interval '25 hours' where key = ${k["idempotency-key"]}`;
    expect((await api.post("/hold", { entity_id: source, amount: 11 }, k)).status).toBe(200);
    await expectHeldMatches(stack);
  });
});
