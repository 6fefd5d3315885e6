import { expect } from "vitest";
import { ledgerViolations, type Stack } from "@ledger/testing";

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
