import type postgres from "postgres";
import { expect } from "vitest";
import type { Stack } from "./stack.js";

/**
 * Every ledger invariant that can be checked from the tables, for the given account:
 * posted balances sum to zero per program and currency; no ordinary entity has available below
 * minus its overdraft limit (a test that lowers a limit below what is used checks that case itself);
 * and every stored balance equals what its legs say it must be.
 * Returns the violations, named; an empty list means all hold.
 */
export async function ledgerViolations(sql: postgres.Sql<{ bigint: bigint }>, accountId: string): Promise<string[]> {
  const violations: string[] = [];
  const sums = await sql<{ program_id: string; currency_code: string; total: bigint }[]>`
    select program_id, currency_code, sum(posted)::int8 as total from entities
    where account_id = ${accountId} group by program_id, currency_code having sum(posted) <> 0`;
  for (const s of sums) violations.push(`program ${s.program_id} ${s.currency_code}: posted balances sum to ${s.total}, not 0`);
  const overdrawn = await sql<{ id: string; available: bigint; overdraft_limit: bigint }[]>`
    select id, posted - pending_debits - held as available, overdraft_limit from entities
    where account_id = ${accountId} and not is_external and posted - pending_debits - held < -overdraft_limit`;
  for (const n of overdrawn) violations.push(`entity ${n.id}: available is ${n.available}, overdraft limit ${n.overdraft_limit}`);
  const drift = await sql<
    { id: string; posted: bigint; from_legs: bigint; pending_debits: bigint; pd_legs: bigint; pending_credits: bigint; pc_legs: bigint }[]
  >`
    select e.id, e.posted, e.pending_debits, e.pending_credits,
      coalesce(sum(case when g.status in ('posted', 'reversed') then
        case l.direction when 'credit' then l.amount else -l.amount end end), 0)::int8 as from_legs,
      coalesce(sum(case when g.status = 'pending' and l.direction = 'debit' then l.amount end), 0)::int8 as pd_legs,
      coalesce(sum(case when g.status = 'pending' and l.direction = 'credit' then l.amount end), 0)::int8 as pc_legs
    from entities e
    left join legs l on l.account_id = e.account_id and l.entity_id = e.id
    left join transaction_groups g on g.account_id = l.account_id and g.id = l.group_id
    where e.account_id = ${accountId}
    group by e.id, e.posted, e.pending_debits, e.pending_credits
    having e.posted <> coalesce(sum(case when g.status in ('posted', 'reversed') then
             case l.direction when 'credit' then l.amount else -l.amount end end), 0)
        or e.pending_debits <> coalesce(sum(case when g.status = 'pending' and l.direction = 'debit' then l.amount end), 0)
        or e.pending_credits <> coalesce(sum(case when g.status = 'pending' and l.direction = 'credit' then l.amount end), 0)`;
  for (const d of drift) {
    violations.push(
      `entity ${d.id}: stored posted/pending_debits/pending_credits ${d.posted}/${d.pending_debits}/${d.pending_credits} ` +
        `but legs say ${d.from_legs}/${d.pd_legs}/${d.pc_legs}`,
    );
  }
  for (const v of await historyViolations(sql, accountId)) violations.push(v);
  return violations;
}

/**
 * The balance history of the account's entities (docs/architecture.md#balance-history): exactly
 * the legs of posted and reversed groups carry a posting stamp; each entity's posted legs, in
 * (posted_at, posted_seq) order, chain exactly (each posted_after is the one before plus the
 * leg's signed amount, from 0) and end at its posted balance; and its latest history row is its
 * balances now.
 */
async function historyViolations(sql: postgres.Sql<{ bigint: bigint }>, accountId: string): Promise<string[]> {
  const violations: string[] = [];
  const misstamped = await sql<{ id: string; status: string; stamped: boolean }[]>`
    select l.id, g.status, l.posted_at is not null as stamped from legs l join transaction_groups g on g.account_id = l.account_id and g.id = l.group_id
    where g.account_id = ${accountId} and (g.status in ('posted', 'reversed')) <> (l.posted_at is not null)`;
  for (const m of misstamped) violations.push(`leg ${m.id} of a ${m.status} group is ${m.stamped ? "" : "not "}stamped as posted`);
  const broken = await sql<{ id: string; entity_id: string; posted_after: bigint; expected: bigint }[]>`
    select id, entity_id, posted_after, expected from (
      select l.id, l.entity_id, l.posted_after,
        coalesce(lag(l.posted_after) over w, 0) + case l.direction when 'credit' then l.amount else -l.amount end as expected
      from legs l join entities e on e.account_id = l.account_id and e.id = l.entity_id
      where e.account_id = ${accountId} and l.posted_at is not null
      window w as (partition by l.entity_id order by l.posted_at, l.posted_seq)) chain
    where posted_after <> expected`;
  for (const b of broken)
    violations.push(`leg ${b.id} of entity ${b.entity_id}: posted_after ${b.posted_after}, the chain says ${b.expected}`);
  const ends = await sql<{ id: string; posted: bigint; last_after: bigint | null; history: string | null; now: string }[]>`
    select e.id, e.posted,
      (select posted_after from legs where account_id = e.account_id and entity_id = e.id and posted_at is not null order by posted_at desc, posted_seq desc limit 1) as last_after,
      (select concat_ws('/', posted, pending_debits, pending_credits, held) from entity_balance_history
       where account_id = e.account_id and entity_id = e.id order by changed_at desc limit 1) as history,
      concat_ws('/', e.posted, e.pending_debits, e.pending_credits, e.held) as now
    from entities e where e.account_id = ${accountId}`;
  for (const e of ends) {
    if ((e.last_after ?? 0n) !== e.posted) violations.push(`entity ${e.id}: posted ${e.posted}, its last posted leg says ${e.last_after}`);
    if ((e.history ?? "0/0/0/0") !== e.now) violations.push(`entity ${e.id}: balances ${e.now}, its last history row says ${e.history}`);
  }
  return violations;
}

/**
 * The invariant between the two services (docs/architecture.md#money-rules-and-invariants): for every entity of the stack's account, the
 * ledger's `held` equals the remaining amounts of the hold service's active holds; and the ledger's
 * own invariants hold. The two live in different databases, so they are compared here.
 */
export async function expectHeldMatches(stack: Stack): Promise<void> {
  const ledger = await stack.sql<{ id: string; held: bigint }[]>`
    select id, held from entities where account_id = ${stack.account.account_id} and not is_external`;
  const holds = await stack.holdSql()<{ entity_id: string; remaining: bigint }[]>`
    select entity_id, sum(amount - captured_amount)::int8 as remaining from holds
    where account_id = ${stack.account.account_id} and status in ('held', 'partially_captured', 'releasing')
    group by entity_id`;
  const remaining = new Map(holds.map((h) => [h.entity_id, h.remaining]));
  const mismatches = ledger
    .filter((e) => e.held !== (remaining.get(e.id) ?? 0n))
    .map((e) => `entity ${e.id}: ledger held ${e.held}, active holds ${remaining.get(e.id) ?? 0n}`);
  expect(mismatches).toEqual([]);
  expect(await ledgerViolations(stack.sql, stack.account.account_id)).toEqual([]);
}
