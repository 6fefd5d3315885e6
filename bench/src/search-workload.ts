// The read workload `search`: `GET /transaction/groups?metadata[k]=v` (REST, through wrk and
// rest-load.lua) and LedgerService.ListTransactionGroups with the same filter (RPC), among
// SEARCH_GROUPS groups of an account of its own. The groups are seeded straight into the database
// with set-wise SQL (bench/README.md, "The search workload"), so the money workloads' account and
// entities are untouched and the seeding takes a minute, not the hours a million calls would.
import type postgres from "postgres";
import type { Operation } from "./closed-loop.js";
import { CallError, type Rpc } from "./connect.js";

export const SEARCH_WORKLOADS = ["search"] as const;
export type SearchWorkloadName = (typeof SEARCH_WORKLOADS)[number];

/** Groups the search runs among. */
export const SEARCH_GROUPS = 1_000_000;
/** Distinct values of the metadata key `k`: each matches SEARCH_GROUPS / SEARCH_VALUES groups (100, five pages of 20). */
export const SEARCH_VALUES = 10_000;
/** The search's one concurrency, whatever --concurrency says: its target is a p99 at 1. */
export const SEARCH_CONCURRENCY = [1];
/** The target: p99 at concurrency 1 under this. */
export const SEARCH_P99_GOAL_MS = 50;

export function isSearchWorkload(name: string): name is SearchWorkloadName {
  return (SEARCH_WORKLOADS as readonly string[]).includes(name);
}

/** Crockford's base32 as ids spell it (packages/common/src/ids.ts). */
const ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz";

/** SQL for the 10 base32 digits of the milliseconds `ms` (an SQL bigint expression): an id's time part. */
function base32Time(ms: string): string {
  return Array.from({ length: 10 }, (_, i) => `substr('${ALPHABET}', ((${ms} >> ${5 * (9 - i)}) & 31)::int + 1, 1)`).join(" || ");
}

/**
 * Seeds `groups` posted deposits of 1 into `entityId`, one a second up to now, each with metadata
 * `{"k": "v<i mod SEARCH_VALUES>", "order": "ord-<i>"}` and its two legs (the external entity's
 * debit, the entity's credit), and moves both balances by the total, so the ledger's invariants hold
 * over the seeded rows as over any others. Ids are real ids: the time of `created_at` in base32,
 * then 16 hex digits of an md5 (hex digits are base32 digits). Then VACUUM ANALYZE, which
 * autovacuum would do after such a load (this machine's Postgres runs without it): the planner's
 * choices depend on those statistics.
 */
export async function seedSearch(
  sql: postgres.Sql<{ bigint: bigint }>,
  scope: { accountId: string; programId: string; externalEntityId: string; entityId: string },
  groups: number,
): Promise<void> {
  const ms = "(extract(epoch from t) * 1000)::bigint";
  await sql.begin(async (tx) => {
    await tx.unsafe(
      `insert into ledger.transaction_groups (id, account_id, program_id, status, description, metadata, currency_code, amount, created_at, updated_at)
       select 'trx-grp_' || ${base32Time(ms)} || substr(md5(i::text), 1, 16), $1, $2, 'posted', 'bench search',
              jsonb_build_object('k', 'v' || (i % ${SEARCH_VALUES}), 'order', 'ord-' || i), 'USD', 1, t, t
       from generate_series(1, $3::int) i, lateral (select now() - ($3::int - i) * interval '1 second' as t) times`,
      [scope.accountId, scope.programId, groups],
    );
    // Each leg posted at its group's moment, with the balance history a write would have left
    // (docs/architecture.md#balance-history): the n-th group takes both entities (fresh, at 0) to
    // -n and n, so the invariants hold over these rows too.
    await tx.unsafe(
      `insert into ledger.legs (id, account_id, group_id, position, entity_id, direction, amount, created_at, posted_at, posted_seq, posted_after)
       select 'trx_' || substr(g.id, 9, 10) || substr(md5(g.id || side.position), 1, 16), $1, g.id, side.position,
              case side.position when 0 then $2 else $3 end, case side.position when 0 then 'debit' else 'credit' end, 1, g.created_at,
              g.created_at, 0, case side.position when 0 then -g.n else g.n end
       from (select id, created_at, row_number() over (order by created_at, id) as n
             from ledger.transaction_groups where account_id = $1) g
       cross join (values (0), (1)) side(position)`,
      [scope.accountId, scope.externalEntityId, scope.entityId],
    );
    await tx.unsafe(
      `update ledger.entities set posted = posted + (case id when $1 then $3::int8 else -$3::int8 end), balance_changed_at = now()
       where account_id = $4 and id in ($1, $2)`,
      [scope.entityId, scope.externalEntityId, groups, scope.accountId],
    );
    await tx.unsafe(
      `insert into ledger.entity_balance_history (account_id, entity_id, changed_at, posted, pending_debits, pending_credits, held)
       select account_id, id, now(), posted, pending_debits, pending_credits, held from ledger.entities
       where account_id = $3 and id in ($1, $2)`,
      [scope.entityId, scope.externalEntityId, scope.accountId],
    );
  });
  await sql.unsafe("vacuum analyze ledger.transaction_groups, ledger.legs, ledger.entities");
}

const randomValue = () => `v${Math.floor(Math.random() * SEARCH_VALUES)}`;

/** One RPC call of the search: ListTransactionGroups for a random value; a page without a group is an error. */
export function rpcSearchOperation(rpc: Rpc): Operation {
  return async () => {
    const res = await rpc.ledger.listTransactionGroups({ metadata: { k: randomValue() } });
    if (res.transactionGroups.length === 0) throw new CallError("empty_page");
    return 1;
  };
}
