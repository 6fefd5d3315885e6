import { sqlState, type Sql } from "@ledger/common";
import { schemaBefore, type SchemaBefore } from "./schema-before.testing.js";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { MONEY_TABLES } from "./money-tables.js";

// Migration 0014 on a ledger that already holds money (docs/scaling.md): every money table keyed
// by account first, the tables that lacked the account filled in from their parents, and foreign
// keys between money tables composite, so a row can only reference its own account's rows.

let previous: SchemaBefore;
let sql: Sql;
let schema: string;

beforeAll(async () => {
  // A database of the previous version: every migration before 0014.
  previous = await schemaBefore(inject("databaseUrl"), "0014", "keys_migration");
  ({ sql, schema } = previous);

  for (const a of ["a", "b"]) {
    await sql`insert into accounts (id, name) values (${`acct_${a}`}, ${a})`;
    await sql`insert into programs (id, account_id, name, currency_code, is_default) values (${`prg_${a}`}, ${`acct_${a}`}, 'p', 'USD', true)`;
    for (const [id, external, posted] of [
      [`ext_${a}`, true, -100],
      [`ent_${a}1`, false, 60],
      [`ent_${a}2`, false, 40],
    ] as const) {
      await sql`
        insert into entities (id, account_id, program_id, name, type, currency_code, is_external, posted, balance_changed_at)
        values (${id}, ${`acct_${a}`}, ${`prg_${a}`}, ${id}, 'wallet', 'USD', ${external}, ${posted}, now())`;
      await sql`
        insert into entity_balance_history (entity_id, changed_at, posted, pending_debits, pending_credits, held)
        values (${id}, now(), ${posted}, 0, 0, 0)`;
    }
    const group = (id: string, reverses: string | null) => sql`
      insert into transaction_groups (id, account_id, program_id, status, currency_code, amount, reverses_group_id)
      values (${id}, ${`acct_${a}`}, ${`prg_${a}`}, 'posted', 'USD', 10, ${reverses})`;
    await group(`grp_${a}1`, null);
    await group(`grp_${a}2`, `grp_${a}1`);
    for (const g of [`grp_${a}1`, `grp_${a}2`]) {
      await sql`
        insert into legs (id, group_id, position, entity_id, direction, amount, posted_at, posted_seq, posted_after)
        values (${`${g}_0`}, ${g}, 0, ${`ent_${a}1`}, 'debit', 10, now(), 0, 0), (${`${g}_1`}, ${g}, 1, ${`ent_${a}2`}, 'credit', 10, now(), 1, 0)`;
    }
    await sql`
      insert into reservations (id, account_id, program_id, entity_id, amount, captured_amount, status)
      values ('hold_1', ${`acct_${a}`}, ${`prg_${a}`}, ${`ent_${a}1`}, 20, 10, 'active')`;
    await sql`
      insert into reservation_captures (id, account_id, reservation_id, amount, group_id)
      values ('hold_1:1', ${`acct_${a}`}, 'hold_1', 10, ${`grp_${a}2`})`;
    await sql`
      insert into balance_alerts (id, account_id, program_id, entity_id, field, operator, value, triggered)
      values (${`alert_${a}`}, ${`acct_${a}`}, ${`prg_${a}`}, ${`ent_${a}1`}, 'available', 'lt', 5, false)`;
    await sql`insert into idempotency_keys (account_id, key, fingerprint) values (${`acct_${a}`}, 'k1', '\\x00')`;
  }
  // A write not yet relayed.
  await sql`insert into outbox_writes (events, event_ids, subjects, payloads) values (1, '{evt_1}', '{s}', array['\\x00'::bytea])`;
});

afterAll(async () => {
  await previous?.close();
});

const applied = async () => (await sql<{ n: number }[]>`select count(*)::int as n from schema_migrations where version = 14`)[0]!.n;

describe("migration 0014 on existing data", () => {
  it("fails as a whole, changing nothing, when a leg has no group to take its account from", async () => {
    await sql`insert into legs (id, group_id, position, entity_id, direction, amount) values ('orphan', 'grp_gone', 0, 'ent_a1', 'debit', 1)`;
    await expect(previous.migrateRest()).rejects.toThrow(/account_id/);
    expect(await applied()).toBe(0);
    const [column] =
      await sql`select 1 from information_schema.columns where table_schema = ${schema} and table_name = 'legs' and column_name = 'account_id'`;
    expect(column).toBeUndefined();
    await sql`delete from legs where id = 'orphan'`;
  });

  it("fills in each row's account from its parent, keeping every row", async () => {
    const before = await counts();
    await previous.migrateRest();
    expect(await applied()).toBe(1);
    expect(await counts()).toEqual(before);
    const legs = await sql<{ id: string; account_id: string }[]>`select id, account_id from legs order by id`;
    expect(legs.every((l) => l.account_id === `acct_${l.id.slice(4, 5)}`)).toBe(true);
    expect(legs).toHaveLength(8);
    const history = await sql<{ entity_id: string; account_id: string }[]>`select entity_id, account_id from entity_balance_history`;
    expect(history.every((h) => h.account_id === `acct_${h.entity_id.slice(4, 5)}`)).toBe(true);
    expect(await sql`select account_id, event_ids from outbox_writes`).toEqual([{ account_id: "", event_ids: ["evt_1"] }]);
    // The per-event outbox of 0005 is gone.
    expect(await sql`select 1 from information_schema.tables where table_schema = ${schema} and table_name = 'outbox'`).toHaveLength(0);
  });

  it("keys every money table by account first, and every unique index with the account", async () => {
    const indexes = await sql<{ table: string; index: string; primary: boolean; columns: string[] }[]>`
      select t.relname as table, i.relname as index, x.indisprimary as primary,
        array(select a.attname from unnest(x.indkey) with ordinality k(n, o) join pg_attribute a on a.attrelid = t.oid and a.attnum = k.n
              order by k.o)::text[] as columns
      from pg_index x join pg_class t on t.oid = x.indrelid join pg_class i on i.oid = x.indexrelid
        join pg_namespace s on s.oid = t.relnamespace
      where s.nspname = ${schema} and x.indisunique and t.relname = any(${[...MONEY_TABLES]})`;
    for (const table of MONEY_TABLES) {
      const primary = indexes.find((i) => i.table === table && i.primary);
      expect(primary?.columns[0], `${table}'s primary key`).toBe("account_id");
    }
    const without = indexes.filter((i) => !i.columns.includes("account_id")).map((i) => i.index);
    expect(without).toEqual([]);
  });

  it("refuses a reference to another account's row", async () => {
    const refused = async (statement: Promise<unknown>) =>
      sqlState(
        await statement.then(
          () => undefined,
          (err: unknown) => err,
        ),
      );
    expect(
      await refused(sql`
        insert into entities (id, account_id, program_id, name, type, currency_code) values ('ent_x', 'acct_a', 'prg_b', 'x', 'w', 'USD')`),
    ).toBe("23503");
    expect(
      await refused(sql`
        insert into balance_alerts (id, account_id, program_id, entity_id, field, operator, value, triggered)
        values ('alert_x', 'acct_a', 'prg_a', 'ent_b1', 'available', 'lt', 5, false)`),
    ).toBe("23503");
    expect(
      await refused(sql`
        insert into reservation_captures (id, account_id, reservation_id, amount, group_id) values ('hold_1:2', 'acct_a', 'hold_1', 1, 'grp_b1')`),
    ).toBe("23503");
    expect(await refused(sql`update transaction_groups set reversed_by_group_id = 'grp_b2' where id = 'grp_a1'`)).toBe("23503");
    // Within the account, the same references hold.
    await sql`update transaction_groups set reversed_by_group_id = 'grp_a2' where account_id = 'acct_a' and id = 'grp_a1'`;
  });
});

async function counts(): Promise<Record<string, number>> {
  const result: Record<string, number> = {};
  for (const table of MONEY_TABLES) result[table] = (await sql<{ n: number }[]>`select count(*)::int as n from ${sql(table)}`)[0]!.n;
  return result;
}
