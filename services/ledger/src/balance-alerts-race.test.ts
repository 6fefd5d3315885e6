import { randomBytes } from "node:crypto";
import type { Client } from "@connectrpc/connect";
import { type LedgerService, TransactionStatus } from "@ledger/proto/ledger/v1/ledger_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readStream, startStack, type Api, type Stack } from "@ledger/e2e";

// Balance alerts under concurrency (docs/architecture.md#balance-alerts), on a real Postgres and
// NATS with two ledger processes, each with its own cache of entity rows, writing the same two
// entities at once: on cached rows, going stale, and on rows read under lock.
//
// The reference is the entity's own history: a trigger the test puts on `entities` records every
// new version of the watched entity's row, in the order the row lock lets them in (a sequence
// taken while the lock is held), and for each alert the version it was created on. Each ledger
// transaction here holds one call (LEDGER_BATCH_MAX=1), so every recorded step is one call, and the
// crossings an alert must have are those of that walk after the step of its creation.

let stack: Stack;
let api: Api;
let ledgers: Array<Client<typeof LedgerService>>;
const tag = randomBytes(4).toString("hex");
const walkTable = `ledger.alert_walk_${tag}`;

beforeAll(async () => {
  stack = await startStack({ ledger: { batchMax: 1 } });
  api = stack.api;
  const replica = await stack.startLedgerReplica();
  ledgers = [stack.ledgerClient(stack.account.api_key), stack.ledgerClient(stack.account.api_key, replica.server.url)];
  await stack.sql.unsafe(`
    create table ${walkTable} (n bigserial primary key, entity_id text, posted int8, available int8);
    create function ${walkTable}() returns trigger language plpgsql as $$
    begin
      insert into ${walkTable} (entity_id, posted, available)
      values (new.id, new.posted, new.posted - new.pending_debits - new.held);
      return null;
    end $$;
    create table ${walkTable}_alerts (alert_id text primary key, step bigint);
    create function ${walkTable}_alerts() returns trigger language plpgsql as $$
    begin
      insert into ${walkTable}_alerts (alert_id, step)
      values (new.id, (select max(n) from ${walkTable} where entity_id = new.entity_id));
      return null;
    end $$`);
});
afterAll(async () => {
  await stack?.sql.unsafe(`
    drop table if exists ${walkTable}, ${walkTable}_alerts;
    drop function if exists ${walkTable}() cascade;
    drop function if exists ${walkTable}_alerts() cascade`);
  await stack?.close();
});

/**
 * Records every new version of `entityId`'s row from now on, starting with one of the row as it
 * is, and for each alert created on it the last version before it: an alert is created under the
 * entity's row lock, so no write of the entity lies between that version and the alert's insert.
 */
async function recordWalk(entityId: string): Promise<void> {
  if (!/^ent_[0-9a-z]{26}$/.test(entityId)) throw new Error(`not an entity id: ${entityId}`);
  await stack.sql.unsafe(`
    create trigger walk_${entityId} after update on ledger.entities for each row
    when (new.id = '${entityId}') execute function ${walkTable}();
    create trigger walk_${entityId} after insert on ledger.balance_alerts for each row
    when (new.entity_id = '${entityId}') execute function ${walkTable}_alerts();
    update ledger.entities set status = status where id = '${entityId}'`);
}

interface Step {
  n: bigint;
  posted: bigint;
  available: bigint;
}

async function walkOf(entityId: string): Promise<Step[]> {
  await stack.sql.unsafe(`
    drop trigger if exists walk_${entityId} on ledger.entities;
    drop trigger if exists walk_${entityId} on ledger.balance_alerts`);
  return stack.sql.unsafe<Step[]>(`select n, posted, available from ${walkTable} where entity_id = $1 order by n`, [entityId]);
}

interface Alert {
  alert_id: string;
  field: "available" | "posted";
  operator: "lt" | "lte" | "gt" | "gte";
  value: number;
  triggered: boolean;
}

function holds(alert: Alert, step: { posted: bigint; available: bigint }): boolean {
  const balance = Number(alert.field === "available" ? step.available : step.posted);
  return { lt: balance < alert.value, lte: balance <= alert.value, gt: balance > alert.value, gte: balance >= alert.value }[alert.operator];
}

/** The crossings of `alert` along `walk` from step `from` on, each as [type, available after it]. */
function crossingsAlong(walk: Step[], from: number, alert: Alert): Array<[string, number]> {
  let triggered = holds(alert, walk[from]!);
  const out: Array<[string, number]> = [];
  for (const step of walk.slice(from + 1)) {
    if (holds(alert, step) === triggered) continue;
    triggered = !triggered;
    out.push([triggered ? "balance.alert_triggered" : "balance.alert_cleared", Number(step.available)]);
  }
  return out;
}

/** Every alert event the ledger published, by alert id, once its outbox is empty. */
async function eventsByAlert(): Promise<Map<string, Array<[string, number]>>> {
  await expect
    .poll(async () => (await stack.sql<{ n: number }[]>`select count(*)::int as n from outbox_writes`)[0]!.n, { timeout: 20_000 })
    .toBe(0);
  const byAlert = new Map<string, Array<[string, number]>>();
  for (const { event } of await readStream(stack.natsUrl, stack.stream)) {
    if (event.data.case !== "balanceAlert") continue;
    const id = event.data.value.alert!.alertId;
    byAlert.set(id, [...(byAlert.get(id) ?? []), [event.type, Number(event.data.value.balances!.available)]]);
  }
  return byAlert;
}

const sorted = (crossings: Array<[string, number]>) => [...crossings].sort((a, b) => (`${a}` < `${b}` ? -1 : 1));

async function entity(funded: number): Promise<string> {
  const id = (await api.post("/entity", { entity_name: "wallet", entity_type: "wallet" })).body.entity.entity_id as string;
  expect((await api.post("/entity/fund", { entity_id: id, amount: funded })).status).toBe(200);
  return id;
}

/**
 * `count` transfers of 100 between `a` and `b` at once: two one way, two back, and so on (from the
 * `first`th), so that however they interleave `a` wanders around where it started. Spread over both
 * ledger processes, or all through one (`via`), whose cached rows then stay current from one
 * transfer to the next.
 */
function transfers(a: string, b: string, count: number, via?: number, first = 0): Promise<unknown> {
  return Promise.all(
    Array.from({ length: count }, (_, n) => {
      const i = first + n;
      const [from, to] = i % 4 < 2 ? [a, b] : [b, a];
      return ledgers[via ?? i % 2]!.createTransaction({
        description: "race",
        status: TransactionStatus.POSTED,
        form: { case: "transfer", value: { fromEntityId: from, toEntityId: to, amount: 100n } },
      }).catch(() => undefined);
    }),
  );
}

describe("balance alerts under concurrent writes", () => {
  it("emits exactly the crossings of the entity's walk, alternating, however the transfers interleave", async () => {
    const a = await entity(1000);
    const b = await entity(1000);
    await recordWalk(a);
    const alert: Alert = (await api.post("/entity/alert", { entity_id: a, field: "available", operator: "lt", value: 1000 })).body.alert;
    expect(alert.triggered).toBe(false);
    for (let wave = 0; wave < 4; wave++) await transfers(a, b, 60);
    const walk = await walkOf(a);
    const from = await creationStep(alert.alert_id, walk);
    const expected = crossingsAlong(walk, from, alert);
    expect(expected.length).toBeGreaterThan(4);
    const events = (await eventsByAlert()).get(alert.alert_id) ?? [];
    expect(sorted(events)).toEqual(sorted(expected));
    const now = (await api.get("/entity/alerts", { entity_id: a })).body.alerts[0];
    expect(now.triggered).toBe(holds(alert, walk.at(-1)!));
  });

  it("applies again, on the row read under lock, a write resting on a version cached before an alert was created", async () => {
    const a = await entity(1000);
    const b = await entity(1000);
    await recordWalk(a);
    await transfers(a, b, 1, 0); // 900: the process caches the row
    const alert: Alert = (await api.post("/entity/alert", { entity_id: a, field: "available", operator: "gte", value: 1000 })).body.alert;
    expect(alert.triggered).toBe(false);
    for (let i = 2; i < 10; i++) await transfers(a, b, 1, 0, i); // 1000, 1100, 1000, 900, ... each on the cached row
    const walk = await walkOf(a);
    const expected = crossingsAlong(walk, await creationStep(alert.alert_id, walk), alert);
    expect(expected).toEqual([
      ["balance.alert_triggered", 1000],
      ["balance.alert_cleared", 900],
      ["balance.alert_triggered", 1000],
      ["balance.alert_cleared", 900],
    ]);
    expect((await eventsByAlert()).get(alert.alert_id)).toEqual(expected);
  });

  it("emits nothing for a deleted alert from a write resting on a version cached before the delete", async () => {
    const a = await entity(1000);
    const b = await entity(1000);
    const alert: Alert = (await api.post("/entity/alert", { entity_id: a, field: "available", operator: "lt", value: 1000 })).body.alert;
    await transfers(a, b, 1, 0); // 900: triggered, and the process caches the row with the alert
    expect((await api.request("DELETE", "/entity/alert", { query: { alert_id: alert.alert_id } })).status).toBe(200);
    for (let i = 2; i < 10; i++) await transfers(a, b, 1, 0, i); // 1000, 1100, 1000, 900, ...
    expect((await eventsByAlert()).get(alert.alert_id)).toEqual([["balance.alert_triggered", 900]]);
  });

  // The transfers of a round go through one process, on its cached rows, while the alert is
  // created and after: a write resting on the row version from before the alert, already sent or
  // sent later, must not pass its check.
  it("never misses or doubles a crossing of an alert created while transfers run", async () => {
    const a = await entity(1000);
    const b = await entity(1000);
    await recordWalk(a);
    const made: Alert[] = [];
    const conditions = [
      ["available", "lt", 1000],
      ["available", "gte", 900],
      ["posted", "gt", 1100],
      ["available", "lte", 1000],
      ["posted", "lt", 900],
      ["available", "gt", 1000],
      ["posted", "gte", 1000],
      ["available", "lt", 1100],
    ] as const;
    for (const [round, [field, operator, value]] of conditions.entries()) {
      const creation = (async () => {
        await new Promise((resolve) => setTimeout(resolve, Math.random() * 15));
        const res = await api.post("/entity/alert", { entity_id: a, field, operator, value });
        expect(res.status, JSON.stringify(res.body)).toBe(200);
        made.push(res.body.alert);
      })();
      await Promise.all([transfers(a, b, 30, round % 2), creation]);
      // And one at a time, each on the rows the one before left in the process's cache, which may
      // be a version from before the alert.
      for (let i = 0; i < 8; i++) await transfers(a, b, 1, round % 2, i);
    }
    const walk = await walkOf(a);
    const events = await eventsByAlert();
    const listed: Alert[] = (await api.get("/entity/alerts", { entity_id: a })).body.alerts;
    for (const alert of made) {
      const from = await creationStep(alert.alert_id, walk);
      // Its triggered at creation is the condition on the row it was created on.
      expect(alert.triggered, alert.alert_id).toBe(holds(alert, walk[from]!));
      expect(sorted(events.get(alert.alert_id) ?? []), `${alert.field} ${alert.operator} ${alert.value}`).toEqual(
        sorted(crossingsAlong(walk, from, alert)),
      );
      expect(listed.find((l) => l.alert_id === alert.alert_id)!.triggered).toBe(holds(alert, walk.at(-1)!));
    }
    expect([...events.values()].flat().length).toBeGreaterThan(0);
  });
});

/** The step of `walk` whose balances the alert was created on. */
async function creationStep(alertId: string, walk: Step[]): Promise<number> {
  const [row] = await stack.sql.unsafe<Array<{ step: bigint }>>(`select step from ${walkTable}_alerts where alert_id = $1`, [alertId]);
  const step = walk.findIndex((s) => s.n === row!.step);
  expect(step, `the creation of ${alertId} in the walk`).toBeGreaterThanOrEqual(0);
  return step;
}
