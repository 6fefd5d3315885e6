import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startWebhookReceiver, type WebhookReceiver } from "@ledger/testing";
import { startStack, type Api, type ApiResponse, type Stack } from "@ledger/e2e";

// The webhook and event endpoints through the gateway: the shapes of docs/webhooks.md#endpoints,
// refusals that depend on stored destinations, and tenancy: another account's key sees 404
// everywhere. Bad input refused before the database is e2e/src/rest-input.handlers.test.ts.

let stack: Stack;
let api: Api;
let receiver: WebhookReceiver;

beforeAll(async () => {
  receiver = await startWebhookReceiver();
  stack = await startStack({ notification: { webhookExtraCa: receiver.ca } });
  api = stack.api;
});
afterAll(async () => {
  await stack?.close();
  await receiver?.close();
});

function expectError(res: ApiResponse, status: number, code: string) {
  expect(res.status).toBe(status);
  expect(res.body.status).toBe("error");
  expect(res.body.error.code).toBe(code);
  expect(JSON.stringify(res.body)).not.toMatch(/select |insert |update |postgres|whsec_/i);
}

async function endpointCount(client: Api) {
  return (await client.get("/webhooks", { limit: "100" })).body.endpoints.length as number;
}

describe("destinations", () => {
  it("creates with the secret shown once, a generated name and event_types null", async () => {
    const res = await api.post("/webhooks", { url: receiver.endpoint("/shape") });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      status: "success",
      endpoint: expect.objectContaining({
        url: receiver.endpoint("/shape"),
        name: expect.stringMatching(/\S/),
        secret: expect.stringMatching(/^whsec_/),
        enabled: true,
        endpoint_id: expect.stringMatching(/^whe_[0-9a-z]{26}$/),
        event_types: null,
      }),
    });
    const id = res.body.endpoint.endpoint_id;
    const named = await api.post("/webhooks", {
      url: receiver.endpoint("/named"),
      name: "Orders",
      description: "ops",
      event_types: ["hold.created", "transaction.posted"],
    });
    expect(named.body.endpoint).toMatchObject({ name: "Orders", description: "ops", event_types: ["hold.created", "transaction.posted"] });

    const list = await api.get("/webhooks");
    expect(list.status).toBe(200);
    expect(list.body.pagination).toEqual({ limit: 20, has_next: false, next_cursor: null });
    expect(list.body.endpoints.map((e: { endpoint_id: string }) => e.endpoint_id)).toEqual([named.body.endpoint.endpoint_id, id]);
    for (const e of list.body.endpoints) expect(e.secret).toBeUndefined();

    const one = await api.get("/webhook", { id });
    expect(one.body).toEqual({
      status: "success",
      endpoint: expect.objectContaining({ url: receiver.endpoint("/shape"), name: res.body.endpoint.name, enabled: true, endpoint_id: id }),
      stats: { total: 0, succeeded: 0, failed: 0, avg_ms: 0 },
    });
    expect(one.body.endpoint.secret).toBeUndefined();
  });

  it("updates url, name, enabled and event_types (null for all) and leaves the rest", async () => {
    const id = (await api.post("/webhooks", { url: receiver.endpoint("/u1"), event_types: ["transaction.created"] })).body.endpoint
      .endpoint_id;
    const res = await api.put("/webhooks", { endpoint_id: id, enabled: false, name: "renamed" });
    expect(res.status).toBe(200);
    expect(res.body.endpoint).toMatchObject({
      enabled: false,
      endpoint_id: id,
      name: "renamed",
      event_types: ["transaction.created"],
      url: receiver.endpoint("/u1"),
    });
    const all = await api.put("/webhooks", { endpoint_id: id, event_types: null, url: receiver.endpoint("/u2") });
    expect(all.body.endpoint).toMatchObject({ event_types: null, url: receiver.endpoint("/u2"), enabled: false, name: "renamed" });
  });

  it("refuses what only the stored destination can tell with 400 or 404, and changes nothing", async () => {
    // Refusals decided before the database is reached are e2e/src/rest-input.handlers.test.ts.
    const id = (await api.post("/webhooks", { url: receiver.endpoint("/bad") })).body.endpoint.endpoint_id;
    expectError(await api.put("/webhooks", { endpoint_id: id, name: "" }), 400, "invalid_request");
    expectError(await api.post("/webhooks/roll", { endpoint_id: id, expire_previous_in_seconds: 10 * 86400 }), 400, "invalid_request");
    expectError(await api.get("/webhook", { id: "whe_nope" }), 404, "not_found");
    expectError(await api.get("/event", { id: "evt_nope" }), 404, "not_found");
    expect((await api.get("/webhook", { id })).body.endpoint).toMatchObject({ enabled: true, url: receiver.endpoint("/bad") });
  });

  it("keeps max_concurrency: 128 by default, as given, and changed by PUT", async () => {
    const plain = await api.post("/webhooks", { url: receiver.endpoint("/cap-default") });
    expect(plain.body.endpoint.max_concurrency).toBe(128);
    const given = await api.post("/webhooks", { url: receiver.endpoint("/cap-given"), max_concurrency: 3 });
    expect(given.status).toBe(200);
    expect(given.body.endpoint.max_concurrency).toBe(3);
    const id = given.body.endpoint.endpoint_id;
    const changed = await api.put("/webhooks", { endpoint_id: id, max_concurrency: 256 });
    expect(changed.status).toBe(200);
    expect(changed.body.endpoint).toMatchObject({ max_concurrency: 256, url: receiver.endpoint("/cap-given") });
    expect((await api.get("/webhook", { id })).body.endpoint.max_concurrency).toBe(256);
  });
});

describe("idempotency", () => {
  it("replays create, roll and resend for the same key and body, and refuses another body", async () => {
    const key = { "idempotency-key": `create-${Date.now()}` };
    const first = await api.post("/webhooks", { url: receiver.endpoint("/idem") }, key);
    const again = await api.post("/webhooks", { url: receiver.endpoint("/idem") }, key);
    expect(again.status).toBe(200);
    expect(again.headers.get("idempotent-replayed")).toBe("true");
    expect(again.body).toEqual(first.body);
    expectError(await api.post("/webhooks", { url: receiver.endpoint("/other") }, key), 422, "idempotency_conflict");
    const id = first.body.endpoint.endpoint_id;
    // The stored response holds no secret in clear.
    const [stored] = await stack.notificationSql!<{ n: number }[]>`
      select count(*)::int as n from notification.idempotency_keys where position(${Buffer.from(first.body.endpoint.secret)} in response) > 0`;
    expect(stored!.n).toBe(0);

    const rollKey = { "idempotency-key": `roll-${Date.now()}` };
    const rolled = await api.post("/webhooks/roll", { endpoint_id: id }, rollKey);
    const rolledAgain = await api.post("/webhooks/roll", { endpoint_id: id }, rollKey);
    expect(rolledAgain.body).toEqual(rolled.body);
    expect(rolled.body.endpoint.secret).not.toBe(first.body.endpoint.secret);

    await api.post("/entity/fund", {
      entity_id: (await api.post("/entity", { entity_name: "w", entity_type: "w" })).body.entity.entity_id,
      amount: 1,
    });
    await expect.poll(async () => (await api.get("/webhooks/deliveries", { endpoint_id: id })).body.deliveries.length).toBeGreaterThan(0);
    const delivery = (await api.get("/webhooks/deliveries", { endpoint_id: id })).body.deliveries[0];
    const resendKey = { "idempotency-key": `resend-${Date.now()}` };
    const resent = await api.post("/webhooks/resend", { delivery_id: delivery.delivery_id }, resendKey);
    const resentAgain = await api.post("/webhooks/resend", { delivery_id: delivery.delivery_id }, resendKey);
    expect(resentAgain.body.delivery_id).toBe(resent.body.delivery_id);
  });
});

describe("idempotency: one mechanism for every write", () => {
  it("replays what the first create and roll returned, their secrets included, even after another roll", async () => {
    const key = { "idempotency-key": `create-then-roll-${Date.now()}` };
    const first = await api.post("/webhooks", { url: receiver.endpoint("/idem-roll") }, key);
    expect(first.status).toBe(200);
    const id = first.body.endpoint.endpoint_id;
    const rollKey = { "idempotency-key": `roll-then-roll-${Date.now()}` };
    const rolled = await api.post("/webhooks/roll", { endpoint_id: id, expire_previous_in_seconds: 0 }, rollKey);
    const rolledAgain = (await api.post("/webhooks/roll", { endpoint_id: id, expire_previous_in_seconds: 0 })).body.endpoint.secret;
    expect(rolledAgain).not.toBe(rolled.body.endpoint.secret);

    const replayed = await api.post("/webhooks", { url: receiver.endpoint("/idem-roll") }, key);
    expect(replayed.status).toBe(200);
    expect(replayed.headers.get("idempotent-replayed")).toBe("true");
    expect(replayed.body).toEqual(first.body);
    const rollReplayed = await api.post("/webhooks/roll", { endpoint_id: id, expire_previous_in_seconds: 0 }, rollKey);
    expect(rollReplayed.headers.get("idempotent-replayed")).toBe("true");
    expect(rollReplayed.body).toEqual(rolled.body);
    expectError(await api.post("/webhooks/roll", { endpoint_id: id, expire_previous_in_seconds: 5 }, rollKey), 422, "idempotency_conflict");

    // No stored response holds a secret in clear.
    for (const secret of [first.body.endpoint.secret, rolled.body.endpoint.secret]) {
      const [stored] = await stack.notificationSql!<{ n: number }[]>`
        select count(*)::int as n from notification.idempotency_keys where position(${Buffer.from(secret)} in response) > 0`;
      expect(stored!.n).toBe(0);
    }
  });

  it("makes one destination of 20 concurrent creates with one key, and replays it to the other 19", async () => {
    const key = { "idempotency-key": `concurrent-${Date.now()}` };
    const url = receiver.endpoint("/idem-concurrent");
    const before = await endpointCount(api);
    const answers = await Promise.all(Array.from({ length: 20 }, () => api.post("/webhooks", { url }, key)));
    expect(answers.map((a) => a.status)).toEqual(Array(20).fill(200));
    expect(answers.filter((a) => a.headers.get("idempotent-replayed") === "true")).toHaveLength(19);
    for (const a of answers) expect(a.body).toEqual(answers[0]!.body);
    expect(await endpointCount(api)).toBe(before + 1);
  });

  it("replays PUT and DELETE, and refuses another body with the key", async () => {
    const id = (await api.post("/webhooks", { url: receiver.endpoint("/idem-put") })).body.endpoint.endpoint_id;
    const key = { "idempotency-key": `put-${Date.now()}` };
    const first = await api.put("/webhooks", { endpoint_id: id, name: "first" }, key);
    expect(first.status).toBe(200);
    expect((await api.put("/webhooks", { endpoint_id: id, name: "second" })).status).toBe(200);
    const again = await api.put("/webhooks", { endpoint_id: id, name: "first" }, key);
    expect(again.headers.get("idempotent-replayed")).toBe("true");
    expect(again.body).toEqual(first.body);
    expect((await api.get("/webhook", { id })).body.endpoint.name).toBe("second");
    expectError(await api.put("/webhooks", { endpoint_id: id, name: "third" }, key), 422, "idempotency_conflict");

    const deleteKey = { "idempotency-key": `delete-${Date.now()}` };
    const deleted = await api.request("DELETE", "/webhooks", { query: { endpoint_id: id }, headers: deleteKey });
    expect(deleted.status).toBe(200);
    const deletedAgain = await api.request("DELETE", "/webhooks", { query: { endpoint_id: id }, headers: deleteKey });
    expect(deletedAgain.status).toBe(200);
    expect(deletedAgain.headers.get("idempotent-replayed")).toBe("true");
  });
});

describe("tenancy", () => {
  it("answers 404 to another account for destinations, deliveries, events, resend, roll and delete", async () => {
    const ep = await api.post("/webhooks", { url: receiver.endpoint("/tenant") });
    const id = ep.body.endpoint.endpoint_id;
    const entity = await api.post("/entity", { entity_name: "w", entity_type: "wallet" });
    await api.post("/entity/fund", { entity_id: entity.body.entity.entity_id, amount: 10 });
    await expect
      .poll(async () => (await api.get("/webhooks/deliveries", { endpoint_id: id })).body.deliveries?.[0]?.status)
      .toBe("succeeded");
    const delivery = (await api.get("/webhooks/deliveries", { endpoint_id: id })).body.deliveries[0];
    expect(delivery).toMatchObject({ delivery_id: expect.stringMatching(/^whd_/), status: "succeeded", attempts: 1, response_status: 200 });

    const { api: other } = await stack.newAccount("intruder");
    expectError(await other.get("/webhook", { id }), 404, "not_found");
    expectError(await other.put("/webhooks", { endpoint_id: id, enabled: false }), 404, "not_found");
    expectError(await other.get("/webhooks/deliveries", { endpoint_id: id }), 404, "not_found");
    expectError(await other.get("/event", { id: delivery.event_id }), 404, "not_found");
    expectError(await other.post("/webhooks/resend", { delivery_id: delivery.delivery_id }), 404, "not_found");
    expectError(await other.post("/webhooks/roll", { endpoint_id: id }), 404, "not_found");
    expectError(await other.request("DELETE", "/webhooks", { query: { endpoint_id: id } }), 404, "not_found");
    expect((await other.get("/webhooks")).body.endpoints).toEqual([]);
    expect((await other.get("/events")).body.events).toEqual([]);
    // Nothing changed for the owner.
    const mine = await api.get("/webhook", { id });
    expect(mine.body.endpoint).toMatchObject({ enabled: true });
    expect((await api.get("/event", { id: delivery.event_id })).status).toBe(200);
  });
});

describe("a delivery's attempts", () => {
  it("lists every attempt one by one, newest first, paged, and 404 to another account", async () => {
    // The first attempt gets a 503, the second a 200: two attempts of one delivery.
    const url = receiver.endpoint("/attempts", (n) => (n === 1 ? { status: 503, body: "busy" } : { status: 200 }));
    const id = (await api.post("/webhooks", { url, event_types: ["transaction.created"] })).body.endpoint.endpoint_id;
    const entity = await api.post("/entity", { entity_name: "attempts", entity_type: "wallet" });
    await api.post("/entity/fund", { entity_id: entity.body.entity.entity_id, amount: 10 });
    await expect
      .poll(async () => (await api.get("/webhooks/deliveries", { endpoint_id: id })).body.deliveries?.[0]?.status, { timeout: 15_000 })
      .toBe("succeeded");
    const delivery = (await api.get("/webhooks/deliveries", { endpoint_id: id })).body.deliveries[0];
    expect(delivery.attempts).toBe(2);

    const res = await api.get("/webhooks/delivery/attempts", { delivery_id: delivery.delivery_id });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      status: "success",
      attempts: [
        {
          attempt: 2,
          attempted_at: expect.stringMatching(/^\d{4}-\d\d-\d\dT/),
          succeeded: true,
          response_status: 200,
          duration_ms: expect.any(Number),
          error: null,
        },
        {
          attempt: 1,
          attempted_at: expect.stringMatching(/^\d{4}-\d\d-\d\dT/),
          succeeded: false,
          response_status: 503,
          duration_ms: expect.any(Number),
          error: null,
        },
      ],
      pagination: { limit: 20, has_next: false, next_cursor: null },
    });
    expect(Date.parse(res.body.attempts[0].attempted_at)).toBeGreaterThan(Date.parse(res.body.attempts[1].attempted_at));

    // Paged one at a time: the pages join up without repeating.
    const first = await api.get("/webhooks/delivery/attempts", { delivery_id: delivery.delivery_id, limit: "1" });
    expect(first.body.attempts.map((a: { attempt: number }) => a.attempt)).toEqual([2]);
    expect(first.body.pagination.has_next).toBe(true);
    const second = await api.get("/webhooks/delivery/attempts", {
      delivery_id: delivery.delivery_id,
      limit: "1",
      cursor: first.body.pagination.next_cursor,
    });
    expect(second.body.attempts.map((a: { attempt: number }) => a.attempt)).toEqual([1]);
    expect(second.body.pagination.has_next).toBe(false);

    // Bounded and checked at the edge.
    expectError(await api.get("/webhooks/delivery/attempts", { delivery_id: delivery.delivery_id, limit: "101" }), 400, "invalid_request");
    expectError(
      await api.get("/webhooks/delivery/attempts", { delivery_id: delivery.delivery_id, cursor: "nope" }),
      400,
      "invalid_request",
    );
    expectError(await api.get("/webhooks/delivery/attempts", {}), 400, "invalid_request");
    expectError(await api.get("/webhooks/delivery/attempts", { delivery_id: "whd_missing" }), 404, "not_found");

    const { api: other } = await stack.newAccount("attempts intruder");
    expectError(await other.get("/webhooks/delivery/attempts", { delivery_id: delivery.delivery_id }), 404, "not_found");
  });
});

describe("events about one object", () => {
  it("filters GET /events by object_id: a group's transaction.* events, an entity's entity.updated", async () => {
    const { api: mine } = await stack.newAccount("events by object");
    const a = (await mine.post("/entity", { entity_name: "a", entity_type: "wallet" })).body.entity.entity_id;
    const b = (await mine.post("/entity", { entity_name: "b", entity_type: "wallet" })).body.entity.entity_id;
    await mine.post("/entity/fund", { entity_id: a, amount: 500 });
    const created = await mine.post("/transaction", { description: "rent", amount: 100, account: { from: a, to: b } });
    expect(created.body, JSON.stringify(created.body)).toMatchObject({ status: "success" });
    const group = created.body.transaction_group_id as string;
    expect(group).toMatch(/^trx-grp_/);
    expect((await mine.post("/transaction/post", { transaction_group_id: group })).status).toBe(200);
    expect((await mine.post("/entity/freeze", { entity_id: b })).status).toBe(200);

    const typesOf = async (objectId: string) =>
      ((await mine.get("/events", { object_id: objectId })).body.events as { type: string }[]).map((e) => e.type);
    await expect.poll(() => typesOf(group), { timeout: 15_000 }).toEqual(["transaction.posted", "transaction.created"]);
    await expect.poll(() => typesOf(b), { timeout: 15_000 }).toEqual(["entity.updated"]);
    // Every event of the account is still listed without the filter, and an unknown id finds none.
    expect((await mine.get("/events", { limit: "100" })).body.events.length).toBeGreaterThanOrEqual(4);
    expect(await typesOf("trx-grp_00000000000000000000000000")).toEqual([]);
    // Paged like the list: one at a time, newest first.
    const page = await mine.get("/events", { object_id: group, limit: "1" });
    expect(page.body.events.map((e: { type: string }) => e.type)).toEqual(["transaction.posted"]);
    const next = await mine.get("/events", { object_id: group, limit: "1", cursor: page.body.pagination.next_cursor });
    expect(next.body.events.map((e: { type: string }) => e.type)).toEqual(["transaction.created"]);

    expectError(await mine.get("/events", { object_id: "x".repeat(129) }), 400, "invalid_request");

    // Migration 0010 derives the id from the stored body of older events: for every event stored
    // here, its derivation gives what the consumer stored, so old and new events are found alike.
    const migration = readFileSync(
      fileURLToPath(new URL("../../services/notification/migrations/0010_events_by_object.sql", import.meta.url)),
      "utf8",
    );
    const derive = /set object_id = (case[\s\S]*?\bend)\b/.exec(migration)![1]!;
    const rows = await stack.notificationSql!.unsafe<{ object_id: string | null; derived: string | null }[]>(
      `select object_id, ${derive} as derived from events`,
    );
    expect(rows.filter((r) => r.object_id !== null).length).toBeGreaterThanOrEqual(4);
    expect(rows.filter((r) => r.object_id !== r.derived)).toEqual([]);
    // Another account's object finds nothing: the filter never reaches past the caller's events.
    expect((await api.get("/events", { object_id: group })).body.events).toEqual([]);
  });
});
