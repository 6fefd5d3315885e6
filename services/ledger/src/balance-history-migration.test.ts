import { isoMicros, newId, parseIsoTime, timestampOfMicros, type Sql } from "@ledger/common";
import { schemaBefore, type SchemaBefore } from "./schema-before.testing.js";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import type { EntityRow } from "./entities.js";
import { findEntityAsOf, statementPage, statementRequest } from "./history.js";

// Migration 0011 on a ledger that already holds money (docs/architecture.md#balance-history): the
// posted legs it finds are dated by their groups and chained per entity, each moment gets a history
// row with the posted balance, and each entity a baseline with its exact balances, so as-of reads
// and statements answer for the time before the migration as docs/api.md#balances-over-time says.

let previous: SchemaBefore;
let sql: Sql;

const T = (n: number) => `2025-01-01T00:00:0${n}.000000Z`;
const micros = (iso: string) => {
  const t = parseIsoTime(iso)!;
  return t.seconds * 1_000_000n + BigInt(t.nanos / 1000);
};
const [X, A, B] = [newId("entity"), newId("entity"), newId("entity")];

beforeAll(async () => {
  // A database of the previous version: every migration before 0011.
  previous = await schemaBefore(inject("databaseUrl"), "0011", "history_migration");
  sql = previous.sql;

  await sql`insert into accounts (id, name) values ('acct_m', 'm')`;
  await sql`insert into programs (id, account_id, name, currency_code, is_default) values ('prg_m', 'acct_m', 'p', 'USD', true)`;
  const entity = (id: string, external: boolean, posted: number, pendingDebits: number, pendingCredits: number) => sql`
    insert into entities (id, account_id, program_id, name, type, currency_code, is_external, posted, pending_debits, pending_credits)
    values (${id}, 'acct_m', 'prg_m', ${id}, 'wallet', 'USD', ${external}, ${posted}, ${pendingDebits}, ${pendingCredits})`;
  await entity(X, true, -1_000, 0, 0);
  await entity(A, false, 690, 20, 0);
  await entity(B, false, 310, 0, 20);
  const group = (id: string, status: string, amount: number, created: string, updated: string, disputed = false) => sql`
    insert into transaction_groups (id, account_id, program_id, status, description, currency_code, amount, disputed, created_at, updated_at)
    values (${id}, 'acct_m', 'prg_m', ${status}, ${id}, 'USD', ${amount}, ${disputed}, ${created}, ${updated})`;
  const legs = (group: string, from: string, to: string, amount: number, at: string) => sql`
    insert into legs (id, group_id, position, entity_id, direction, amount, created_at)
    values (${`${group}_0`}, ${group}, 0, ${from}, 'debit', ${amount}, ${at}), (${`${group}_1`}, ${group}, 1, ${to}, 'credit', ${amount}, ${at})`;
  await group("g1_fund", "posted", 1_000, T(1), T(1));
  await legs("g1_fund", X, A, 1_000, T(1));
  // Created pending at T2, posted at T3.
  await group("g2_rent", "posted", 300, T(2), T(3));
  await legs("g2_rent", A, B, 300, T(2));
  // Created posted at T4, reversed at T5 by g4.
  await group("g3_coffee", "reversed", 50, T(4), T(5));
  await legs("g3_coffee", A, B, 50, T(4));
  await group("g4_reversal", "posted", 50, T(5), T(5));
  await legs("g4_reversal", B, A, 50, T(5));
  await group("g5_pending", "pending", 20, T(6), T(6));
  await legs("g5_pending", A, B, 20, T(6));
  // Created posted at T6, disputed at T7: dated by its creation.
  await group("g6_disputed", "posted", 10, T(6), T(7), true);
  await legs("g6_disputed", A, B, 10, T(6));

  await previous.migrateRest();
});

afterAll(async () => {
  await previous?.close();
});

describe("migration 0011 on existing data", () => {
  it("dates and chains the posted legs of every entity, and leaves pending ones unstamped", async () => {
    const rows = await sql<{ id: string; posted_us: bigint | null; posted_after: bigint | null }[]>`
      select id, (extract(epoch from posted_at) * 1000000)::int8 as posted_us, posted_after from legs
      where entity_id = ${A} order by posted_at nulls last, posted_seq`;
    expect(rows.map((r) => [r.id, r.posted_us === null ? null : isoMicros(timestampOfMicros(r.posted_us)), r.posted_after])).toEqual([
      ["g1_fund_1", T(1), 1_000n],
      ["g2_rent_0", T(3), 700n],
      ["g3_coffee_0", T(4), 650n],
      ["g4_reversal_1", T(5), 700n],
      ["g6_disputed_0", T(6), 690n],
      ["g5_pending_0", null, null],
    ]);
    const [external] = await sql<{ posted_after: bigint }[]>`select posted_after from legs where entity_id = ${X}`;
    expect(external!.posted_after).toBe(-1_000n);
  });

  it("answers as-of reads and statements for before the migration, and exactly from its baseline on", async () => {
    const [a] = await sql<EntityRow[]>`select * from entities where id = ${A}`;
    const asOf = async (micro: bigint) => {
      const row = await findEntityAsOf(sql, "acct_m", "prg_m", A, micro);
      return [row.posted, row.pending_debits, row.pending_credits, row.held];
    };
    expect(await asOf(micros(T(1)))).toEqual([0n, 0n, 0n, 0n]);
    expect(await asOf(micros(T(1)) + 1n)).toEqual([1_000n, 0n, 0n, 0n]);
    expect(await asOf(micros(T(4)) + 1n)).toEqual([650n, 0n, 0n, 0n]);
    expect(await asOf(micros(T(8)))).toEqual([690n, 0n, 0n, 0n]);
    const [baseline] = await sql<{ us: bigint }[]>`
      select (extract(epoch from balance_changed_at) * 1000000)::int8 as us from entities where id = ${A}`;
    expect(await asOf(baseline!.us + 1n)).toEqual([690n, 20n, 0n, 0n]);

    const page = await statementPage(sql, a!, statementRequest(micros(T(2)), micros(T(6)), 2, ""));
    expect(page.statement).toMatchObject({ openingPosted: 1_000n, closingPosted: 700n });
    expect(page.entries!.map((e) => [e.transactionId, e.postedAfter])).toEqual([
      ["g2_rent_0", 700n],
      ["g3_coffee_0", 650n],
    ]);
    expect(page.page).toMatchObject({ hasNext: true });
    const next = await statementPage(sql, a!, statementRequest(micros(T(2)), micros(T(6)), 2, page.page!.nextCursor!));
    expect(next.entries!.map((e) => [e.transactionId, e.postedAfter])).toEqual([["g4_reversal_1", 700n]]);
    expect(next.page).toMatchObject({ hasNext: false });
  });
});
