import type { OutboxWrite, Tx } from "@ledger/common";
import type { AlertChange } from "./balance-alert-watch.js";
import type { ExternalBalances } from "./money-load.js";
import type { BookEffects, EntityState } from "./money-rules.js";

/** An ordinary entity's row version (xmin): the one the rules read, or the one a write made. */
export interface EntityVersion {
  id: string;
  version: string;
}

/** An entity's row version as the rules read it, with its account (every row is addressed by both). */
export interface ReadVersion extends EntityVersion {
  account_id: string;
}

/** One outbox row of a write: the events of one account, in order (an outbox row is one account's). */
export interface AccountOutboxWrite extends OutboxWrite {
  accountId: string;
}

/** What a write answers: the external entities' new balances and the changed ordinary rows' new versions. */
export interface Written {
  externals: ExternalBalances[];
  ordinary: EntityVersion[];
}

/**
 * Writes a batch's effects in one statement, sent at once and not awaited here, so a batch costs
 * at most one round trip to write however many commands it holds: ordinary balances (absolute),
 * external balances (deltas), new groups and legs, changed groups, reservations and captures, and
 * one outbox row per account with its events. Every row is addressed by its account and its id
 * (docs/scaling.md), so the statement can be routed to the account's shard. Every new group's program must be its account's, and every
 * new leg's entity must exist and its group be one of the statement's new groups: counted once for
 * the statement, which fails as a whole (23503, `require_references`) otherwise. The statement
 * text never changes, so Postgres plans it once per connection.
 *
 * `read` is every ordinary entity the rules read, with the version they read. The statement locks
 * those rows in id order and fails as a whole (40001, `require_unchanged_entities`) unless every
 * one has that version once locked: that is what lets the rules run on cached rows with nothing
 * read or locked before (docs/architecture.md#cached-balances), even on rows another transaction
 * has written and not yet committed (docs/decisions/chained-writes.md). After a locked read the
 * check always holds.
 *
 * `alerts`: the balance alerts whose `triggered` the batch changed (balance-alert-watch.ts); their
 * events are in `outbox` already. Nearly always none.
 */
export function persist(
  tx: Tx,
  batch: Omit<BookEffects, "events">,
  outbox: AccountOutboxWrite[],
  now: Date,
  read: ReadVersion[],
  alerts: AlertChange[],
): Promise<Written> {
  const { ordinary, external, groups, legs, groupChanges, reservations, reservationChanges, captures, posted, outboxRows } =
    writeParameters(batch, outbox);
  return tx<Array<ExternalBalances & { version: string | null }>>`
    with
    -- Every row read is locked, and counts as unchanged if the version it has once locked is the
    -- one read. Not filtered by version before the lock: a write chained behind another
    -- transaction of the process expects that one's version (docs/decisions/chained-writes.md),
    -- which this statement's snapshot cannot see yet; the lock waits for that transaction, and
    -- then yields the row as it committed it.
    locked as materialized (
      select e.id, e.xmin = r.version as unchanged from entities e
        join json_to_recordset(${json(read)}::text::json) as r(id text, account_id text, version xid) on r.account_id = e.account_id and r.id = e.id
      order by e.id
      for no key update of e),
    unchanged as (select id from locked where unchanged),
    ordinary_balances as (
      update entities e
      set posted = v.posted, pending_debits = v.pending_debits, pending_credits = v.pending_credits, held = v.held, updated_at = ${now},
          balance_changed_at = ${tx.unsafe(HISTORY_STAMP)}
      from json_to_recordset(${ordinary}::text::json) as v(id text, account_id text, posted int8, pending_debits int8, pending_credits int8, held int8)
        join unchanged u on u.id = v.id
      where e.account_id = v.account_id and e.id = v.id
      returning e.id, e.account_id, e.xmin::text as version, e.balance_changed_at, e.posted, e.pending_debits, e.pending_credits, e.held),
    external_balances as (
      update entities e
      set posted = e.posted + v.posted, pending_debits = e.pending_debits + v.pending_debits,
          pending_credits = e.pending_credits + v.pending_credits, updated_at = ${now}, balance_changed_at = ${tx.unsafe(HISTORY_STAMP)}
      from json_to_recordset(${external}::text::json) as v(id text, account_id text, posted int8, pending_debits int8, pending_credits int8, held int8)
      -- Ordinary entities are locked before external ones, in every transaction: this condition
      -- makes Postgres take all of "unchanged" (an init plan) before it locks its first external row.
      where e.account_id = v.account_id and e.id = v.id and (select count(*) from unchanged) >= 0
      returning e.id, e.account_id, e.posted, e.pending_debits, e.pending_credits, e.held, e.balance_changed_at),
    -- Balance history (docs/architecture.md#balance-history): every changed entity's balances as
    -- this write left them, under the stamp it gave the entity, read from the updates themselves
    -- (an external entity's from the row its delta landed on).
    changed_balances as (
      select id, account_id, balance_changed_at as at, posted, pending_debits, pending_credits, held from ordinary_balances
      union all
      select id, account_id, balance_changed_at, posted, pending_debits, pending_credits, held from external_balances),
    balance_history as (
      insert into entity_balance_history (account_id, entity_id, changed_at, posted, pending_debits, pending_credits, held)
      select account_id, id, at, posted, pending_debits, pending_credits, held from changed_balances),
    -- The legs this write posted, each with its place among them and what the write's later posted
    -- legs on its entity add up to: its posted_after is the entity's posted balance after the
    -- write less that. New ones are inserted with it (new_legs), earlier ones settled here.
    posted_leg_rows as materialized (
      select * from json_to_recordset(${posted}::text::json) as r(id text, entity_id text, seq int, later int8, settled boolean)),
    settled_legs as (
      update legs l set posted_at = b.at, posted_seq = p.seq, posted_after = b.posted - p.later
      from posted_leg_rows p join changed_balances b on b.id = p.entity_id
      -- A leg's account is its entity's (the rules never move money across accounts).
      where p.settled and l.account_id = b.account_id and l.id = p.id),
    group_rows as materialized (
      select * from json_to_recordset(${groups}::text::json) as r(id text, account_id text, program_id text, status text,
        description text, metadata jsonb, currency_code text, amount int8, reverses_group_id text, created_at timestamptz)),
    leg_rows as materialized (
      select * from json_to_recordset(${legs}::text::json) as r(id text, account_id text, group_id text, position int,
        entity_id text, direction text, amount int8, created_at timestamptz)),
    new_groups as (
      insert into transaction_groups (id, account_id, program_id, status, description, metadata, currency_code, amount,
                                      reverses_group_id, created_at, updated_at)
      select id, account_id, program_id, status, description, metadata, currency_code, amount, reverses_group_id, created_at, created_at
      from group_rows),
    new_legs as (
      insert into legs (id, account_id, group_id, position, entity_id, direction, amount, created_at, posted_at, posted_seq, posted_after)
      select l.id, l.account_id, l.group_id, l.position, l.entity_id, l.direction, l.amount, l.created_at, b.at, p.seq, b.posted - p.later
      from leg_rows l left join posted_leg_rows p on p.id = l.id left join changed_balances b on b.id = p.entity_id),
    -- What foreign keys would check with a trigger per row, counted once for the statement
    -- (migrations/0007_reference_checks_per_statement.sql). "offset 0" keeps each look-up an index
    -- probe per row: without it the planner may hash the whole table for a few dozen rows.
    dangling as materialized (
      select (select count(*) from group_rows g
              where not exists (select 1 from programs p where p.id = g.program_id and p.account_id = g.account_id offset 0))
           + (select count(*) from leg_rows l
              where not exists (select 1 from entities e where e.account_id = l.account_id and e.id = l.entity_id offset 0))
           + (select count(*) from leg_rows l
              where not exists (select 1 from group_rows g where g.account_id = l.account_id and g.id = l.group_id)) as n),
    changed_groups as (
      update transaction_groups g
      set status = v.status, disputed = v.disputed, reason = v.reason, reversed_by_group_id = v.reversed_by_group_id, updated_at = v.updated_at
      from json_to_recordset(${groupChanges}::text::json) as v(id text, account_id text, status text, disputed boolean,
        reason text, reversed_by_group_id text, updated_at timestamptz)
      where g.account_id = v.account_id and g.id = v.id),
    new_reservations as (
      insert into reservations (id, account_id, program_id, entity_id, amount, captured_amount, status, created_at, updated_at)
      select id, account_id, program_id, entity_id, amount, captured_amount, status, created_at, updated_at
      from json_to_recordset(${reservations}::text::json) as r(id text, account_id text, program_id text, entity_id text,
        amount int8, captured_amount int8, status text, created_at timestamptz, updated_at timestamptz)),
    changed_reservations as (
      update reservations x
      set captured_amount = v.captured_amount, status = v.status, updated_at = v.updated_at
      from json_to_recordset(${reservationChanges}::text::json) as v(id text, account_id text, captured_amount int8, status text, updated_at timestamptz)
      where x.account_id = v.account_id and x.id = v.id),
    new_captures as (
      insert into reservation_captures (id, account_id, reservation_id, amount, group_id)
      select id, account_id, reservation_id, amount, group_id
      from json_to_recordset(${captures}::text::json) as r(id text, account_id text, reservation_id text, amount int8, group_id text)),
    -- Balance alerts: the new "triggered" of each alert the batch turned, worked out in the process
    -- from the balances each call left (balance-alert-watch.ts); an empty list nearly always, and
    -- then the step stops at its first condition. Like external balances, it waits for
    -- "unchanged": an alert's row is locked only after its entity's, the order in which alerts are
    -- created and deleted too (balance-alerts.ts).
    alert_flips as (
      update balance_alerts a set triggered = v.triggered
      from json_to_recordset(${json(alerts)}::text::json) as v(id text, account_id text, triggered boolean)
      where ${alerts.length}::int > 0 and a.account_id = v.account_id and a.id = v.id and (select count(*) from unchanged) >= 0),
    new_events as (
      insert into outbox_writes (account_id, events, event_ids, subjects, payloads)
      select o.account_id, cardinality(o.event_ids), o.event_ids, o.subjects,
        array(select decode(p, 'base64') from unnest(o.payloads) with ordinality as u(p, n) order by n)
      from json_to_recordset(${outboxRows}::text::json) as o(account_id text, event_ids text[], subjects text[], payloads text[])
      where ${outbox.length}::int > 0)
    select id, posted, pending_debits, pending_credits, null::text as version from external_balances
    union all
    select id, null, null, null, version from ordinary_balances
    union all
    select null, null, null, null, null where not require_unchanged_entities((select count(*) from unchanged), ${read.length}::int)
    union all
    select null, null, null, null, null where not require_references((select n from dangling))`
    .execute()
    .then((rows) => ({
      externals: rows.filter((r) => r.version === null),
      ordinary: rows.flatMap((r) => (r.version === null ? [] : [{ id: r.id, version: r.version }])),
    }));
}

/** The rows `persist` writes, each kind as one JSON parameter (amounts as text, so int8 stays exact). */
function writeParameters(batch: Omit<BookEffects, "events">, outbox: AccountOutboxWrite[]) {
  const changed = batch.changedEntities;
  const balances = (states: EntityState[]) =>
    json(
      states.map((s) => ({
        id: s.row.id,
        account_id: s.row.account_id,
        posted: `${s.posted}`,
        pending_debits: `${s.pendingDebits}`,
        pending_credits: `${s.pendingCredits}`,
        held: `${s.held}`,
      })),
    );
  const ordinary = balances(changed.filter((s) => !s.row.is_external));
  const external = balances(changed.filter((s) => s.row.is_external));
  const groups = json(
    batch.newGroups.map((g) => ({
      id: g.id,
      account_id: g.account_id,
      program_id: g.program_id,
      status: g.status,
      description: g.description,
      metadata: g.metadata,
      currency_code: g.currency_code,
      amount: `${g.amount}`,
      reverses_group_id: g.reverses_group_id,
      created_at: g.created_at,
    })),
  );
  const legs = json(
    batch.newGroups.flatMap((g) =>
      g.legs.map((l) => ({
        id: l.id,
        account_id: g.account_id,
        group_id: l.group_id,
        position: l.position,
        entity_id: l.entity_id,
        direction: l.direction,
        amount: `${l.amount}`,
        created_at: l.created_at,
      })),
    ),
  );
  const groupChanges = json(
    batch.changedGroups.map((g) => ({
      id: g.id,
      account_id: g.account_id,
      status: g.status,
      disputed: g.disputed,
      reason: g.reason,
      reversed_by_group_id: g.reversed_by_group_id,
      updated_at: g.updated_at,
    })),
  );
  const reservations = json(
    batch.newReservations.map((r) => Object.assign({}, r, { amount: `${r.amount}`, captured_amount: `${r.captured_amount}` })),
  );
  const reservationChanges = json(
    batch.changedReservations.map((r) => ({
      id: r.id,
      account_id: r.account_id,
      captured_amount: `${r.captured_amount}`,
      status: r.status,
      updated_at: r.updated_at,
    })),
  );
  const captures = json(batch.newCaptures.map((c) => Object.assign({}, c, { amount: `${c.amount}` })));
  const posted = json(postedLegRows(batch));
  const outboxRows = json(
    outbox.map((o) => ({ account_id: o.accountId, event_ids: o.eventIds, subjects: o.subjects, payloads: o.payloads })),
  );
  return { ordinary, external, groups, legs, groupChanges, reservations, reservationChanges, captures, posted, outboxRows };
}

/**
 * Locks the ordinary entities the rules read, in id order, as `persist` does, and answers with the
 * transaction's id: the version (xmin) every row the transaction writes will have if it commits.
 * Sent right before a chained write (docs/decisions/chained-writes.md): its answer comes once the
 * rows are this transaction's, so a write chained behind it cannot take them first.
 */
export function lockForChain(tx: Tx, read: ReadVersion[]): Promise<string> {
  return tx<Array<{ version: string }>>`
    with locked as materialized (
      select e.id from entities e
        join json_to_recordset(${json(read)}::text::json) as r(id text, account_id text) on r.account_id = e.account_id and r.id = e.id
      order by e.id
      for no key update of e)
    -- Counted, so that Postgres takes every lock before it answers (an unread step would not run).
    select pg_current_xact_id()::xid::text as version, (select count(*) from locked) as locked`
    .execute()
    .then((rows) => rows[0]!.version);
}

/**
 * The stamp of an entity's balance change: the database's clock once the write holds the row's
 * lock (an ordinary entity's is taken before, an external one's by this update), so per entity the
 * stamps increase in commit order; and past the entity's previous stamp even should the clock step
 * back. Evaluated per row, again on the newest row version when an update waited for another.
 */
const HISTORY_STAMP = "greatest(clock_timestamp(), e.balance_changed_at + interval '1 microsecond')";

/**
 * The rows of `posted_leg_rows`: each leg the book posted with `seq`, its place in the book's
 * order, `later`, the signed sum of the book's posted legs after it on the same entity, and
 * `settled` for a leg of a group that existed before (its row is updated, not inserted).
 */
function postedLegRows(batch: Pick<BookEffects, "postedLegs" | "changedGroups">): object[] {
  const settled = new Set(batch.changedGroups.flatMap((g) => g.legs.map((l) => l.id)));
  const later = new Map<string, bigint>();
  const rows: object[] = [];
  for (let seq = batch.postedLegs.length - 1; seq >= 0; seq--) {
    const leg = batch.postedLegs[seq]!;
    const after = later.get(leg.entity_id) ?? 0n;
    rows.push({ id: leg.id, entity_id: leg.entity_id, seq, later: `${after}`, settled: settled.has(leg.id) });
    later.set(leg.entity_id, after + (leg.direction === "credit" ? leg.amount : -leg.amount));
  }
  return rows;
}

/**
 * JSON text of rows for json_to_recordset, whose bigints the callers have already made exact
 * decimal strings (a replacer function would run for every key of every row); dates go in ISO form.
 */
function json(rows: object[]): string {
  return rows.length === 0 ? "[]" : JSON.stringify(rows);
}
