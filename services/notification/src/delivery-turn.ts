// One turn of the delivery loop (worker.ts): a short transaction that writes the outcomes of the
// attempts answered since the last turn and claims the next due deliveries (delivery-claim.ts).
import { pipelinedTransaction, retried, type Sql, type Tx } from "@ledger/common";
import type { Outcome } from "./delivery-attempt.js";
import { claimDeliveries, type Claimant, type Claimed } from "./delivery-claim.js";

// Outcomes written per turn at most; more wait for the next turn.
const OUTCOMES_PER_TURN = 1_000;

/**
 * Postgres NOTIFY channel on which a turn that wrote outcomes (so freed leases) tells the other
 * processes, which then look again at once instead of waiting out their contended pause.
 */
export const SLOTS_FREED_CHANNEL = "webhook_slots_freed";

/**
 * Leases and outcomes commit without waiting for the WAL flush: they are visible to every other
 * process at once (what keeps one attempt from being sent twice), and only a crash of Postgres
 * itself within its WAL writer's delay could forget one, which makes the attempt go again, as a
 * notification process dying mid-attempt does. Events are stored with full durability (they are
 * acked to JetStream after their commit).
 */
function commitWithoutFlushWait(tx: Tx): Promise<unknown> {
  return tx`set local synchronous_commit = off`.execute();
}

/**
 * The turns of one process. Attempts whose answer arrived wait here for the next turn, which
 * writes their outcomes and claims the next deliveries in one transaction: one commit per turn,
 * not one per batch of each.
 */
export class DeliveryTurns {
  private readonly ended: Array<{ outcome: Outcome; done: (err?: unknown) => void }> = [];

  /** `wake` asks the loop for a turn. */
  constructor(
    private readonly sql: Sql,
    private readonly claimant: Claimant,
    private readonly wake: () => void,
  ) {}

  /** Outcomes waiting to be written. */
  get waiting(): number {
    return this.ended.length;
  }

  /** Queues an ended attempt's outcome; resolves once it is written. */
  record(outcome: Outcome): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.ended.push({ outcome, done: (err) => (err ? reject(err) : resolve()) });
      this.wake();
    });
  }

  /**
   * One turn: writes the queued outcomes, then leases up to `free` due deliveries, in one
   * transaction. The outcomes go first, so the claim's count of live leases no longer has the
   * attempts that just ended: a slot frees when its answer arrives, not a turn later. When the
   * transaction fails the outcomes stay queued for the next turn (their write is idempotent: it
   * applies only on the attempt's own lease).
   */
  async turn(free: number): Promise<{ claimed: Claimed[]; contended: boolean }> {
    const batch = this.ended.splice(0, OUTCOMES_PER_TURN);
    let result: { claimed: Claimed[]; contended: boolean };
    try {
      // Pipelined: BEGIN, the outcomes and COMMIT travel with the claim's statements, so a turn
      // waits on Postgres once per claim statement and once for the commit.
      result = await retried(() =>
        pipelinedTransaction(this.sql, async (tx, writes) => {
          writes.push(commitWithoutFlushWait(tx));
          if (batch.length > 0) {
            writes.push(
              writeOutcomes(
                tx,
                batch.map((b) => b.outcome),
              ),
            );
            // Delivered at commit, to every process listening (this one ignores its own).
            writes.push(tx`select pg_notify(${SLOTS_FREED_CHANNEL}, ${this.claimant.workerId})`.execute());
          }
          return free > 0 ? claimDeliveries(tx, this.claimant, free, writes) : { claimed: [], contended: false };
        }),
      );
    } catch (err) {
      this.ended.unshift(...batch);
      throw err;
    }
    for (const b of batch) b.done();
    return result;
  }

  /** Writes what is still queued, for stop(); outcomes that cannot be written fail their attempts' promises. */
  async flush(): Promise<void> {
    for (let tries = 0; this.ended.length > 0 && tries < 3; tries++) await this.turn(0).catch(() => {});
    for (const b of this.ended.splice(0)) b.done(new Error("the outcome could not be written"));
  }
}

function writeOutcomes(tx: Tx, outcomes: Outcome[]): Promise<unknown> {
  const column = <T>(f: (o: Outcome) => T) => outcomes.map(f);
  // Every expression on the right reads the row as it was: a delivery that was stopped while
  // its attempt ran keeps its `failed` status and stop reason, and only gains the attempt.
  // Rows are updated in id order, so two writers never wait on each other crosswise. The
  // attempt's row is added only when its delivery row still had the attempt's lease, so a
  // turn written again after a commit whose answer was lost adds nothing twice.
  return tx`
    with o as (
      select * from unnest(
        ${column((o) => o.c.id)}::text[], ${column((o) => o.c.lease_id)}::text[], ${column((o) => o.c.endpoint_id)}::text[],
        ${column((o) => (o.succeeded ? "t" : "f"))}::text[],
        ${column((o) => o.result.status || null)}::int[], ${column((o) => o.excerpt)}::text[],
        ${column((o) => o.result.durationMs)}::int[], ${column((o) => o.result.error || null)}::text[],
        ${column((o) => o.next)}::text[], ${column((o) => o.delayMs)}::int[])
        as o(id, lease_id, endpoint_id, succeeded, status, excerpt, duration_ms, error, next, delay_ms)),
    written as (
      update deliveries d set
        attempts = d.attempts + 1,
        response_status = o.status,
        response_body = o.excerpt,
        duration_ms = o.duration_ms,
        error = case when d.status = 'pending' then o.error else d.error end,
        status = case when d.status = 'pending' then o.next else d.status end,
        next_attempt_at = case when d.status = 'pending' and o.next = 'pending'
                               then now() + make_interval(secs => o.delay_ms / 1000.0) else null end,
        lease_id = null,
        last_attempt_at = now(),
        updated_at = now()
      from (select * from o order by id) o
      where d.id = o.id and d.lease_id = o.lease_id
      returning d.id)
    insert into delivery_attempts (delivery_id, endpoint_id, succeeded, response_status, duration_ms, error)
    select o.id, o.endpoint_id, o.succeeded = 't', o.status, o.duration_ms, o.error
    from o join written w on w.id = o.id`.execute();
}
