import { fromBinary } from "@bufbuild/protobuf";
import { EventSchema } from "@ledger/proto/events/v1/events_pb.js";
import { BalanceAlertField, BalanceAlertOperator } from "@ledger/proto/ledger/v1/ledger_pb.js";
import { describe, expect, it } from "vitest";
import { AlertWatch } from "./balance-alert-watch.js";
import type { BalanceAlertRow } from "./balance-alerts.js";
import { Book, entityState, type BookEntity, type MoneyCommand } from "./money-rules.js";

// Which units cross a balance alert, with no database: group commit puts several calls in one
// book, and each call counts apart, judged on the balances it left; a batch call counts as one.

const at = new Date("2026-01-01T00:00:00.000Z");

function entity(id: string, posted: bigint, alerts?: BalanceAlertRow[]): BookEntity {
  const row: BookEntity = {
    id,
    account_id: "acct_1",
    program_id: "prg_1",
    currency_code: "USD",
    is_external: false,
    status: "active",
    overdraft_limit: 0n,
    posted,
    pending_debits: 0n,
    pending_credits: 0n,
    held: 0n,
    version: "1",
  };
  if (alerts) row.alerts = alerts;
  return row;
}

const lowAlert: BalanceAlertRow = {
  id: "bal_1",
  account_id: "acct_1",
  program_id: "prg_1",
  entity_id: "ent_a",
  field: "available",
  operator: "lt",
  value: 100n,
  triggered: false,
  created_at: at,
};

function book(): Book {
  const rows = [entity("ent_a", 150n, [lowAlert]), entity("ent_b", 1000n)];
  return new Book({
    entities: new Map(rows.map((r) => [r.id, entityState(r)])),
    groups: new Map(),
    reservations: new Map(),
    captures: new Map(),
    externalIdFor: () => undefined,
    now: at,
  });
}

const origin = (requestId: string) => ({ requestId, traceparent: "" });
const move = (from: string, to: string, amount: bigint, requestId: string): MoneyCommand => ({
  kind: "create",
  accountId: "acct_1",
  programId: "prg_1",
  requestId,
  traceparent: "",
  description: "move",
  metadata: null,
  status: "posted",
  legs: [
    { entityId: from, direction: "debit", amount },
    { entityId: to, direction: "credit", amount },
  ],
});

function decoded(watch: AlertWatch) {
  return watch.writes(at).events.map((e) => {
    const event = fromBinary(EventSchema, e.payload);
    if (event.data.case !== "balanceAlert") throw new Error("not a balance alert event");
    return {
      type: event.type,
      requestId: event.requestId,
      triggered: event.data.value.alert!.triggered,
      balances: event.data.value.balances,
    };
  });
}

describe("AlertWatch", () => {
  it("counts each unit of a shared transaction apart, in order, with the balances each left", () => {
    const b = book();
    const watch = new AlertWatch(b);
    expect(b.apply(move("ent_a", "ent_b", 60n, "req_1")).ok).toBe(true); // 90
    watch.unitDone(origin("req_1"));
    expect(b.apply(move("ent_b", "ent_a", 20n, "req_2")).ok).toBe(true); // 110
    watch.unitDone(origin("req_2"));
    expect(decoded(watch)).toEqual([
      {
        type: "balance.alert_triggered",
        requestId: "req_1",
        triggered: true,
        balances: expect.objectContaining({ posted: 90n, available: 90n }),
      },
      {
        type: "balance.alert_cleared",
        requestId: "req_2",
        triggered: false,
        balances: expect.objectContaining({ posted: 110n, available: 110n }),
      },
    ]);
    const writes = watch.writes(at);
    // Back where it started: nothing to store, and the cached row keeps the alert as it was.
    expect(writes.changes).toEqual([]);
    expect(writes.alertsOf.get("ent_a")).toEqual([lowAlert]);
  });

  it("judges a unit of many commands (a batch call) once, on where it ends", () => {
    const b = book();
    const watch = new AlertWatch(b);
    b.apply(move("ent_a", "ent_b", 60n, "req_1")); // 90
    b.apply(move("ent_b", "ent_a", 20n, "req_1")); // 110
    watch.unitDone(origin("req_1"));
    expect(watch.writes(at).events).toEqual([]);
    b.apply(move("ent_a", "ent_b", 30n, "req_2")); // 80
    b.apply(move("ent_a", "ent_b", 30n, "req_2")); // 50
    watch.unitDone(origin("req_2"));
    expect(decoded(watch).map((e) => e.type)).toEqual(["balance.alert_triggered"]);
    expect(watch.writes(at).changes).toEqual([{ id: "bal_1", account_id: "acct_1", triggered: true }]);
    expect(watch.writes(at).alertsOf.get("ent_a")).toEqual([{ ...lowAlert, triggered: true }]);
  });

  it("sees no crossing in a refused or rolled-back unit", () => {
    const b = book();
    const watch = new AlertWatch(b);
    const start = b.checkpoint();
    b.apply(move("ent_a", "ent_b", 100n, "req_1"));
    b.rollback(start); // an atomic batch refused at a later item
    watch.unitDone(origin("req_1"));
    expect(b.apply(move("ent_a", "ent_b", 500n, "req_2")).ok).toBe(false);
    watch.unitDone(origin("req_2"));
    expect(watch.writes(at).events).toEqual([]);
  });

  it("writes the alert as the API shows it into the event", () => {
    const b = book();
    const watch = new AlertWatch(b);
    b.apply(move("ent_a", "ent_b", 150n, "req_1"));
    watch.unitDone(origin("req_1"));
    const [event] = watch.writes(at).events.map((e) => fromBinary(EventSchema, e.payload));
    expect(event).toMatchObject({ type: "balance.alert_triggered", accountId: "acct_1", programId: "prg_1" });
    expect(event!.data.value).toMatchObject({
      entityId: "ent_a",
      programId: "prg_1",
      alert: {
        alertId: "bal_1",
        entityId: "ent_a",
        field: BalanceAlertField.AVAILABLE,
        operator: BalanceAlertOperator.LT,
        value: 100n,
        triggered: true,
      },
      balances: { posted: 0n, pendingDebits: 0n, pendingCredits: 0n, held: 0n, available: 0n },
    });
  });
});
