import { Code, ConnectError } from "@connectrpc/connect";
import { BalanceAlertField, BalanceAlertOperator } from "@ledger/proto/ledger/v1/ledger_pb.js";
import type { Event } from "@ledger/proto/events/v1/events_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ledgerViolations, readStream, startStack, type Api, type Stack } from "@ledger/e2e";

// Balance alerts (docs/api.md#balance-alerts) over REST and RPC, on a real Postgres and NATS:
// their checks and bounds, tenancy, and the events of their crossings, read back from the stream.

let stack: Stack;
let api: Api;

beforeAll(async () => {
  stack = await startStack({ notification: {} });
  api = stack.api;
});
afterAll(async () => stack?.close());

async function entity(api_ = api, headers?: Record<string, string>): Promise<string> {
  const res = await api_.post("/entity", { entity_name: "wallet", entity_type: "wallet" }, headers);
  expect(res.status).toBe(200);
  return res.body.entity.entity_id;
}

async function fund(entityId: string, amount: number): Promise<void> {
  expect((await api.post("/entity/fund", { entity_id: entityId, amount })).status).toBe(200);
}

async function transfer(from: string, to: string, amount: number): Promise<void> {
  const res = await api.post("/transaction", { description: "move", status: "posted", amount, account: { from, to } });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
}

async function alert(entityId: string, field: string, operator: string, value: number) {
  const res = await api.post("/entity/alert", { entity_id: entityId, field, operator, value });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body.alert;
}

/**
 * The balance alert events of `entityId` the ledger published, in stream order, once everything it
 * committed so far is published (its outbox is empty).
 */
async function alertEvents(entityId: string): Promise<Event[]> {
  await expect.poll(async () => (await stack.sql<{ n: number }[]>`select count(*)::int as n from outbox_writes`)[0]!.n).toBe(0);
  return (await readStream(stack.natsUrl, stack.stream))
    .map((m) => m.event)
    .filter((e) => e.data.case === "balanceAlert" && e.data.value.entityId === entityId);
}

const crossings = (events: Event[]) =>
  events.map((e) => {
    if (e.data.case !== "balanceAlert") throw new Error("not a balance alert event");
    return [e.type, e.data.value.alert!.alertId, Number(e.data.value.balances!.available)];
  });

describe("POST /entity/alert, GET /entity/alerts, DELETE /entity/alert", () => {
  it("creates, lists and deletes alerts, with triggered as the condition at creation and no event", async () => {
    const id = await entity();
    await fund(id, 500);
    const low = await alert(id, "available", "lt", 1000);
    expect(low).toEqual({
      alert_id: expect.stringMatching(/^bal_[0-9a-hjkmnp-tv-z]{26}$/),
      entity_id: id,
      field: "available",
      operator: "lt",
      value: 1000,
      triggered: true,
      created_at: expect.any(String),
    });
    const high = await alert(id, "posted", "gte", 501);
    expect(high).toMatchObject({ field: "posted", operator: "gte", value: 501, triggered: false });
    const edge = await alert(id, "posted", "lte", 500);
    expect(edge.triggered).toBe(true);

    const listed = await api.get("/entity/alerts", { entity_id: id });
    expect(listed.status).toBe(200);
    expect(listed.body).toEqual({ status: "success", alerts: [low, high, edge] });

    const deleted = await api.request("DELETE", "/entity/alert", { query: { alert_id: high.alert_id } });
    expect(deleted.status).toBe(200);
    expect(deleted.body).toEqual({ status: "success" });
    expect((await api.get("/entity/alerts", { entity_id: id })).body.alerts).toEqual([low, edge]);
    const again = await api.request("DELETE", "/entity/alert", { query: { alert_id: high.alert_id } });
    expect(again.status).toBe(404);
    expect(again.body.error.code).toBe("not_found");
    expect(await alertEvents(id)).toEqual([]);
  });

  it("answers 400 for a bad field, operator or value, and creates nothing", async () => {
    const id = await entity();
    const good = { entity_id: id, field: "available", operator: "lt", value: 10 };
    for (const [body, field] of [
      [{ ...good, field: "held" }, "field"],
      [{ ...good, field: undefined }, "field"],
      [{ ...good, field: 1 }, "field"],
      [{ ...good, operator: "eq" }, "operator"],
      [{ ...good, operator: "LT" }, "operator"],
      [{ ...good, value: 1.5 }, "value"],
      [{ ...good, value: "10" }, "value"],
      [{ ...good, value: 2 ** 53 }, "value"],
      [{ ...good, value: -(2 ** 53) }, "value"],
      [{ ...good, value: undefined }, "value"],
      [{ ...good, threshold: 5 }, "threshold"],
    ] as const) {
      const res = await api.post("/entity/alert", body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.body.error.code).toBe("invalid_request");
      expect(res.body.error.details.field).toBe(field);
    }
    expect((await api.post("/entity/alert", { ...good, entity_id: "" })).status).toBe(400);
    expect((await api.get("/entity/alerts", { entity_id: id })).body.alerts).toEqual([]);
    // The bounds themselves are taken, as is zero.
    for (const value of [Number.MAX_SAFE_INTEGER, -Number.MAX_SAFE_INTEGER, 0]) await alert(id, "available", "gt", value);
  });

  it("refuses an 11th alert on one entity with 422 too_many_alerts, also when they are created at once", async () => {
    const id = await entity();
    const results = await Promise.all(
      Array.from({ length: 14 }, (_, i) => api.post("/entity/alert", { entity_id: id, field: "posted", operator: "gt", value: i })),
    );
    expect(results.filter((r) => r.status === 200)).toHaveLength(10);
    for (const refused of results.filter((r) => r.status !== 200)) {
      expect(refused.status).toBe(422);
      expect(refused.body.error).toMatchObject({ code: "too_many_alerts", details: { entity_id: id, limit: 10 } });
    }
    expect((await api.get("/entity/alerts", { entity_id: id })).body.alerts).toHaveLength(10);
    // Deleting one makes room for one.
    const first = (await api.get("/entity/alerts", { entity_id: id })).body.alerts[0];
    expect((await api.request("DELETE", "/entity/alert", { query: { alert_id: first.alert_id } })).status).toBe(200);
    await alert(id, "posted", "gt", 100);
    expect((await api.post("/entity/alert", { entity_id: id, field: "posted", operator: "gt", value: 101 })).status).toBe(422);
  });

  it("refuses the program's external entity and a closed entity, and takes a frozen one", async () => {
    const external = (await api.get("/program")).body.program.external_entity_id as string;
    const onExternal = await api.post("/entity/alert", { entity_id: external, field: "posted", operator: "lt", value: 0 });
    expect(onExternal.status).toBe(422);
    expect(onExternal.body.error).toMatchObject({ code: "invalid_state", details: { is_external: true } });

    const closed = await entity();
    const kept = await alert(closed, "available", "lt", 10);
    expect((await api.post("/entity/close", { entity_id: closed })).status).toBe(200);
    const onClosed = await api.post("/entity/alert", { entity_id: closed, field: "posted", operator: "lt", value: 0 });
    expect(onClosed.status).toBe(422);
    expect(onClosed.body.error).toMatchObject({ code: "entity_closed", details: { entity_id: closed } });
    // An alert made before the close stays, to list and delete.
    expect((await api.get("/entity/alerts", { entity_id: closed })).body.alerts).toEqual([kept]);
    expect((await api.request("DELETE", "/entity/alert", { query: { alert_id: kept.alert_id } })).status).toBe(200);

    const frozen = await entity();
    expect((await api.post("/entity/freeze", { entity_id: frozen })).status).toBe(200);
    await alert(frozen, "available", "gte", 1);
    await fund(frozen, 5);
    expect(crossings(await alertEvents(frozen)).map(([type]) => type)).toEqual(["balance.alert_triggered"]);
  });

  it("answers 404 for another account's or program's entity and alert on every path, and changes nothing", async () => {
    const id = await entity();
    const mine = await alert(id, "available", "lt", 10);
    const { api: other } = await stack.newAccount();
    const created = await other.post("/entity/alert", { entity_id: id, field: "available", operator: "lt", value: 5 });
    expect(created.status).toBe(404);
    expect(created.body.error.code).toBe("not_found");
    expect((await other.get("/entity/alerts", { entity_id: id })).status).toBe(404);
    expect((await other.request("DELETE", "/entity/alert", { query: { alert_id: mine.alert_id } })).status).toBe(404);

    // The same account's other program is another scope.
    const program = (await api.post("/program", { program_name: "second" })).body.program.program_id as string;
    const inProgram = { program_id: program };
    expect((await api.get("/entity/alerts", { entity_id: id }, inProgram)).status).toBe(404);
    expect((await api.request("DELETE", "/entity/alert", { query: { alert_id: mine.alert_id }, headers: inProgram })).status).toBe(404);
    const theirs = await entity(api, inProgram);
    expect((await api.post("/entity/alert", { entity_id: theirs, field: "posted", operator: "lt", value: 1 })).status).toBe(404);

    for (const alertId of ["bal_nope", "ent_01jc9x8z3k2m4n5p6q7r8s9t0v", "bal_01jc9x8z3k2m4n5p6q7r8s9t0v"]) {
      expect((await api.request("DELETE", "/entity/alert", { query: { alert_id: alertId } })).status).toBe(404);
    }
    expect((await api.get("/entity/alerts", { entity_id: id })).body.alerts).toEqual([mine]);
  });

  it("works over RPC, refusing bad arguments with invalid_argument and another account with not_found", async () => {
    const id = await entity();
    const ledger = stack.ledgerClient(stack.account.api_key);
    const { alert: created } = await ledger.createBalanceAlert({
      entityId: id,
      field: BalanceAlertField.AVAILABLE,
      operator: BalanceAlertOperator.GTE,
      value: -50n,
    });
    expect(created).toMatchObject({ entityId: id, field: BalanceAlertField.AVAILABLE, operator: BalanceAlertOperator.GTE, value: -50n });
    expect(created!.triggered).toBe(true);
    expect((await ledger.listBalanceAlerts({ entityId: id })).alerts.map((a) => a.alertId)).toEqual([created!.alertId]);

    const refused = async (call: Promise<unknown>, code: Code) => {
      const err = await call.then(
        () => undefined,
        (e: unknown) => ConnectError.from(e),
      );
      expect(err?.code).toBe(code);
    };
    const ok = { entityId: id, field: BalanceAlertField.POSTED, operator: BalanceAlertOperator.LT, value: 1n };
    await refused(ledger.createBalanceAlert({ ...ok, field: BalanceAlertField.UNSPECIFIED }), Code.InvalidArgument);
    await refused(ledger.createBalanceAlert({ ...ok, operator: 9 as BalanceAlertOperator }), Code.InvalidArgument);
    await refused(ledger.createBalanceAlert({ ...ok, value: 2n ** 53n }), Code.InvalidArgument);
    await refused(ledger.createBalanceAlert({ ...ok, value: -(2n ** 53n) }), Code.InvalidArgument);
    await refused(ledger.createBalanceAlert({ ...ok, entityId: "" }), Code.InvalidArgument);
    await refused(ledger.deleteBalanceAlert({ alertId: "" }), Code.InvalidArgument);

    const { account } = await stack.newAccount();
    const stranger = stack.ledgerClient(account.api_key);
    await refused(stranger.createBalanceAlert(ok), Code.NotFound);
    await refused(stranger.listBalanceAlerts({ entityId: id }), Code.NotFound);
    await refused(stranger.deleteBalanceAlert({ alertId: created!.alertId }), Code.NotFound);

    await ledger.deleteBalanceAlert({ alertId: created!.alertId });
    expect((await ledger.listBalanceAlerts({ entityId: id })).alerts).toEqual([]);
  });
});

describe("balance alert events", () => {
  it("emits one event per crossing, each way, with the alert and the balances the call left", async () => {
    const id = await entity();
    const other = await entity();
    await fund(id, 1500);
    const low = await alert(id, "available", "lt", 1000);
    expect(low.triggered).toBe(false);
    await transfer(id, other, 400); // 1100: no crossing
    await transfer(id, other, 200); // 900: triggered
    await transfer(id, other, 100); // 800: still triggered
    await fund(id, 300); // 1100: cleared
    await transfer(other, id, 1); // 1101: still cleared
    const events = await alertEvents(id);
    expect(crossings(events)).toEqual([
      ["balance.alert_triggered", low.alert_id, 900],
      ["balance.alert_cleared", low.alert_id, 1100],
    ]);
    const [triggered] = events;
    expect(triggered!.accountId).toBe(stack.account.account_id);
    expect((await api.get("/entity/alerts", { entity_id: id })).body.alerts[0].triggered).toBe(false);

    // As delivered to webhooks: the event log holds the same data, snake_case.
    const program = (await api.get("/entity", { entity_id: id })).body.entity.program_id;
    let delivered: { type: string; data: unknown } | undefined;
    await expect
      .poll(async () => {
        delivered = (await api.get("/event", { id: triggered!.id })).body.event;
        return delivered?.type;
      })
      .toBe("balance.alert_triggered");
    expect(delivered!.data).toEqual({
      alert: { ...low, triggered: true },
      entity_id: id,
      program_id: program,
      balances: { posted: 900, pending_debits: 0, pending_credits: 0, held: 0, available: 900 },
    });
  });

  it("judges a batch on its result as a whole: crossing and crossing back emits nothing, ending across emits one", async () => {
    const id = await entity();
    const other = await entity();
    await fund(id, 1000);
    await fund(other, 1000);
    const low = await alert(id, "available", "lt", 1000);
    const item = (from: string, to: string, amount: number) => ({ description: "b", status: "posted", amount, account: { from, to } });
    const back = await api.post("/transaction/batch", { transactions: [item(id, other, 300), item(other, id, 300)] });
    expect(back.body.succeeded).toBe(2);
    expect(await alertEvents(id)).toEqual([]);
    const across = await api.post("/transaction/batch", {
      transactions: [item(id, other, 300), item(other, id, 100), item(id, other, 100), item(id, other, 5000)],
    });
    expect(across.body).toMatchObject({ succeeded: 3, failed: 1 });
    expect(crossings(await alertEvents(id))).toEqual([["balance.alert_triggered", low.alert_id, 700]]);
    // An atomic batch refused as a whole moved nothing and crossed nothing.
    const refused = await api.post("/transaction/batch", { atomic: true, transactions: [item(other, id, 500), item(id, other, 99999)] });
    expect(refused.status).toBe(422);
    expect(await alertEvents(id)).toHaveLength(1);
  });

  it("crosses on pending debits and holds, which move available, and not on what moves neither balance watched", async () => {
    const id = await entity();
    const other = await entity();
    await fund(id, 1000);
    const low = await alert(id, "available", "lt", 500);
    const posted = await alert(id, "posted", "lt", 500);
    const pending = await api.post("/transaction", { description: "p", amount: 600, account: { from: id, to: other } });
    expect(pending.status).toBe(200); // available 400, posted 1000
    const hold = await api.post("/hold", { entity_id: id, amount: 300 }); // available 100
    expect(hold.status).toBe(200);
    const canceled = await api.post("/transaction/cancel", { transaction_group_id: pending.body.transaction_group_id }); // available 700
    expect(canceled.status).toBe(200);
    const captured = await api.post("/hold/capture", { hold_id: hold.body.hold.hold_id, amount: 300, destination_entity_id: other });
    expect(captured.status).toBe(200); // posted 700, held 0, available 700
    expect(crossings(await alertEvents(id))).toEqual([
      ["balance.alert_triggered", low.alert_id, 400],
      ["balance.alert_cleared", low.alert_id, 700],
    ]);
    await transfer(id, other, 250); // posted 450, available 450
    expect(crossings(await alertEvents(id)).slice(2)).toEqual([
      ["balance.alert_triggered", low.alert_id, 450],
      ["balance.alert_triggered", posted.alert_id, 450],
    ]);
  });

  it("emits nothing once the alert is deleted, nor for an alert another entity has", async () => {
    const id = await entity();
    const other = await entity();
    await fund(id, 100);
    const gone = await alert(id, "posted", "gt", 150);
    await alert(other, "posted", "gt", 0);
    expect((await api.request("DELETE", "/entity/alert", { query: { alert_id: gone.alert_id } })).status).toBe(200);
    await fund(id, 100);
    expect(await alertEvents(id)).toEqual([]);
    expect(await ledgerViolations(stack.sql, stack.account.account_id)).toEqual([]);
  });
});
