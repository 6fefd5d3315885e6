// What must hold after a run, however fast it was: the ledger's sums, no negative available, the
// hold service and the ledger agreeing on `held`, and every event delivered exactly once.
import { ledgerViolations } from "@ledger/e2e";
import type postgres from "postgres";
import type { DeliveryTracker } from "./webhooks.js";

type Sql = postgres.Sql<{ bigint: bigint }>;

/** Ledger invariants of each account, plus `held` against the hold service's active holds. */
export async function moneyViolations(sql: Sql, accountIds: string[]): Promise<string[]> {
  const violations: string[] = [];
  for (const accountId of accountIds) {
    // One at a time: a spread of a very long list would overflow the stack.
    for (const v of await ledgerViolations(sql, accountId)) violations.push(v);
    const mismatched = await sql<{ id: string; held: bigint; remaining: bigint }[]>`
      select e.id, e.held, coalesce(h.remaining, 0)::int8 as remaining
      from ledger.entities e
      left join (
        select entity_id, sum(amount - captured_amount) as remaining from hold.holds
        where account_id = ${accountId} and status in ('held', 'partially_captured', 'releasing')
        group by entity_id
      ) h on h.entity_id = e.id
      where e.account_id = ${accountId} and not e.is_external and e.held <> coalesce(h.remaining, 0)`;
    for (const m of mismatched) violations.push(`entity ${m.id}: ledger held ${m.held}, active holds ${m.remaining}`);
  }
  return violations;
}

/**
 * Every event of the webhook account was delivered to the receiver exactly once, and every
 * delivery ended `succeeded`. Waits (bounded) for deliveries still in flight.
 */
export async function deliveryViolations(
  sql: Sql,
  accountId: string,
  tracker: DeliveryTracker,
  endpointId: string | undefined,
  capMs = 60_000,
): Promise<string[]> {
  // Only the tracked destination's deliveries: another one (the slow destination) was stopped on purpose.
  const ofEndpoint = endpointId ? sql`and endpoint_id = ${endpointId}` : sql``;
  const deadline = Date.now() + capMs;
  const pending = async () =>
    (
      await sql<
        { n: number }[]
      >`select count(*)::int as n from notification.deliveries where account_id = ${accountId} ${ofEndpoint} and status = 'pending'`
    )[0]?.n ?? 0;
  while ((await pending()) > 0 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 100));
  tracker.update();
  const events = await sql<{ id: string }[]>`select id from notification.events where account_id = ${accountId}`;
  const failed = await sql<{ status: string; n: number }[]>`
    select status, count(*)::int as n from notification.deliveries where account_id = ${accountId} ${ofEndpoint} and status <> 'succeeded' group by status`;
  const violations: string[] = failed.map((f) => `${f.n} deliveries ended ${f.status}`);
  const expected = new Set(events.map((e) => e.id));
  let never = 0;
  let twice = 0;
  for (const id of expected) {
    const n = tracker.counts.get(id) ?? 0;
    if (n === 0) never++;
    if (n > 1) twice++;
  }
  const unknown = [...tracker.counts.keys()].filter((id) => !expected.has(id)).length;
  if (never) violations.push(`${never} of ${expected.size} events never reached the receiver`);
  if (twice) violations.push(`${twice} events reached the receiver more than once`);
  if (unknown) violations.push(`${unknown} received event ids are not in the notification service's events`);
  if (expected.size === 0) violations.push("no events were stored for the webhook account");
  return violations;
}
