// The claim of a delivery turn (delivery-turn.ts): due deliveries leased to this process, at most
// each destination's `max_concurrency` in flight across every process.
import { randomUUID } from "node:crypto";
import type { Tx } from "@ledger/common";

/** A delivery leased to this process, with what its attempt sends and signs. */
export interface Claimed {
  id: string;
  endpoint_id: string;
  event_id: string;
  event_type: string;
  request_id: string;
  traceparent: string;
  url: string;
  body: string;
  attempts: number;
  secret: Uint8Array;
  previous_secret: Uint8Array | null;
  previous_active: boolean;
  lease_id: string;
}

/** A destination with due work that this claim holds the lock of. */
interface Destination {
  id: string;
  enabled: boolean;
  deleted: boolean;
  max_concurrency: number;
}

// Advisory-lock namespace of destination claims (an arbitrary constant of this service).
const CLAIM_LOCK_SPACE = 7_301;
// Destinations looked at per claim, oldest due first.
const CLAIM_ENDPOINTS = 1_000;

/** Who claims: the process (its leases are `<workerId>.<random>`), how long a lease holds, and its attempts waiting for an answer. */
export interface Claimant {
  workerId: string;
  leaseMs: number;
  /** This process's attempts to a destination still waiting for their answer. */
  sending(endpointId: string): number;
}

/**
 * Leases up to `limit` due deliveries in `tx`; statements whose answer it does not need go
 * into `writes`, sent at once and awaited with the commit. `contended` says some destination
 * with due work got nothing because another process held its lock, its slots or its rows:
 * worth looking again soon.
 *
 * Per destination, at most its `max_concurrency` attempts are leased at once across every
 * process: a claim takes a transaction-scoped advisory lock per destination (skipping those
 * another process is claiming for right now), then counts the destination's live leases in a
 * statement of its own, which therefore sees every lease committed before the lock was granted.
 */
export async function claimDeliveries(
  tx: Tx,
  claimant: Claimant,
  limit: number,
  writes: Promise<unknown>[],
): Promise<{ claimed: Claimed[]; contended: boolean }> {
  const candidates = await lockDestinations(tx);
  const endpoints = candidates.filter((e) => e.locked);
  let contended = endpoints.length < candidates.length;
  // A destination switched off while its deliveries waited: they stop here (docs/webhooks.md#retries-and-delivery-states).
  for (const e of endpoints.filter((e) => !e.enabled || e.deleted)) {
    writes.push(
      tx`
      update deliveries set status = 'failed', error = ${e.deleted ? "endpoint_deleted" : "endpoint_disabled"},
        next_attempt_at = null, updated_at = now()
      where endpoint_id = ${e.id} and status = 'pending' and next_attempt_at <= now()`.execute(),
    );
  }
  const live = endpoints.filter((e) => e.enabled && !e.deleted);
  if (live.length === 0) return { claimed: [], contended };
  const claimed = await leaseDue(tx, claimant, live, limit);
  if (claimed.length < limit) {
    // A destination that got nothing though this process has room for it: its slots or its
    // due rows are held by another process, which frees them when it writes its outcomes.
    const got = new Set(claimed.map((c) => c.endpoint_id));
    if (live.some((e) => !got.has(e.id) && claimant.sending(e.id) < e.max_concurrency)) contended = true;
  }
  return { claimed, contended };
}

/**
 * Destinations with due work, oldest due first, locked for this claim; a destination whose
 * lock another process holds comes back with `locked` false, skipped now and looked at by the
 * next claim.
 */
function lockDestinations(tx: Tx): Promise<Array<Destination & { locked: boolean }>> {
  return tx<Array<Destination & { locked: boolean }>>`
    with recursive pending_endpoints(endpoint_id) as (
      -- Each destination with pending deliveries, one index probe apiece (a loose index scan
      -- of deliveries_due_by_endpoint): a destination with a huge backlog costs no more than
      -- one with a single delivery, and cannot hide the others from the claim.
      (select endpoint_id from deliveries where status = 'pending' order by endpoint_id limit 1)
      union all
      select (select d.endpoint_id from deliveries d
              where d.status = 'pending' and d.endpoint_id > p.endpoint_id order by d.endpoint_id limit 1)
      from pending_endpoints p where p.endpoint_id is not null),
    candidates as materialized (
      select en.id, en.enabled, en.deleted_at is not null as deleted, en.max_concurrency, oldest.at as oldest
      from pending_endpoints p
      join endpoints en on en.id = p.endpoint_id
      cross join lateral (
        select d.next_attempt_at as at from deliveries d
        where d.endpoint_id = p.endpoint_id and d.status = 'pending'
        order by d.next_attempt_at limit 1) oldest
      where oldest.at <= now()
      order by oldest.at limit ${CLAIM_ENDPOINTS})
    select id, enabled, deleted, max_concurrency, pg_try_advisory_xact_lock(${CLAIM_LOCK_SPACE}, hashtext(id)) as locked
    from candidates order by oldest`;
}

/**
 * One statement counts each destination's attempts in flight and takes new leases up to its
 * max_concurrency: the other processes' live leases (it starts after the statement locking the
 * destinations, so its snapshot has every lease another process committed before, and none can
 * commit more until this transaction ends), plus this process's attempts still waiting for an
 * answer, counted in memory. This process's own leases whose answer arrived but whose outcome the
 * next turn writes are no longer in flight, so they no longer hold a slot: the slot frees when the
 * answer arrives, not a turn later. This process's free slots are shared among the destinations
 * one round at a time, oldest due first, so one with a large backlog cannot take them all.
 * Per destination, its oldest due deliveries come through the (endpoint_id, next_attempt_at)
 * index. The due conditions stand on the locked rows themselves, so a row leased after this
 * statement's snapshot is re-read by the lock and dropped, never sent twice.
 */
function leaseDue(tx: Tx, claimant: Claimant, live: Destination[], limit: number): Promise<Claimed[]> {
  const { workerId } = claimant;
  // Prefixed with this process's id, so the claim can tell its own leases from the others'.
  const lease = `${workerId}.${randomUUID()}`;
  return tx<Claimed[]>`
    with live as (
      select * from unnest(${live.map((e) => e.id)}::text[], ${live.map((e) => e.max_concurrency)}::int[],
                           ${live.map((e) => claimant.sending(e.id))}::int[])
        with ordinality as l(endpoint_id, max_concurrency, mine, ord)),
    room as (
      select l.endpoint_id, l.ord, l.max_concurrency - l.mine - (
        select count(*) from deliveries d
        where d.endpoint_id = l.endpoint_id and d.status = 'pending' and d.lease_id is not null
          and d.lease_id not like ${`${workerId}.%`} and d.next_attempt_at > now())::int as room
      from live l),
    quota as (
      select endpoint_id, count(*)::int as n from (
        select r.endpoint_id from room r cross join generate_series(1, r.room) as s(round)
        order by s.round, r.ord limit ${limit}) s
      group by endpoint_id),
    picked as (
      select d.id from quota q cross join lateral (
        select id from deliveries d
        where d.endpoint_id = q.endpoint_id and d.status = 'pending' and d.next_attempt_at <= now()
        order by d.next_attempt_at, d.id
        limit q.n
        for update skip locked) d),
    leased as (
      update deliveries set lease_id = ${lease}, next_attempt_at = now() + make_interval(secs => ${claimant.leaseMs / 1000}), updated_at = now()
      where id in (select id from picked)
      returning id, endpoint_id, event_id, attempts)
    select l.id, l.endpoint_id, l.event_id, ev.type as event_type, ev.request_id, ev.traceparent, en.url, ev.body, l.attempts,
           en.secret, en.previous_secret,
           coalesce(en.previous_secret_expires_at > now(), false) as previous_active,
           ${lease} as lease_id
    from leased l
    join endpoints en on en.id = l.endpoint_id
    -- One index lookup per leased row. As a plain join the planner, which expects far more
    -- leased rows than a claim takes, hashed the whole events table once it had grown and
    -- spilled it to temporary files (docs/decisions/webhook-claim-lookup.md). The LIMIT keeps
    -- the subquery from being merged back into a join.
    cross join lateral (
      select e.type, e.request_id, e.traceparent, e.body from events e where e.id = l.event_id limit 1) ev`;
}
