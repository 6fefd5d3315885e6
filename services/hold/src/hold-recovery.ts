// The hold service's background work: releasing holds past their expiry, and finishing the
// operations a crashed process left half done. Both repeat steps that are safe to repeat
// (hold-completions.ts), so replicas running them at once never do one hold's work twice.
import { metricsRegistry, NO_TRACE, type CallOrigin } from "@ledger/common";
import { Counter } from "prom-client";
import { finishCapture, finishCreate, finishRelease, type HoldDeps } from "./hold-completions.js";
import type { CaptureRow, HoldRow } from "./hold-rows.js";

// Expiry and recovery act for no client call: a request id of their own for the logs, no trace.
const background = (requestId: string): CallOrigin => ({ requestId, trace: NO_TRACE });

/** Releases every hold whose `expires_at` has passed. Several replicas never release one twice. */
export async function expireDue(deps: HoldDeps): Promise<number> {
  const { sql, log } = deps;
  const due: HoldRow[] = await sql.begin(async (tx): Promise<HoldRow[]> => {
    const rows = await tx<HoldRow[]>`
      select * from holds h
      where status in ('held', 'partially_captured') and expires_at <= now()
        and not exists (select 1 from captures c where c.hold_id = h.id and c.status = 'pending')
      order by expires_at limit 100 for update skip locked`;
    if (rows.length === 0) return [];
    // Asked again now that the holds are locked: the select's snapshot is older than its locks,
    // and a capture's intent that committed in between (decided before expires_at) must
    // complete before the expiry releases the rest in the ledger.
    return tx<HoldRow[]>`
      update holds h set status = 'releasing', release_reason = 'expired', updated_at = now()
      where id in ${tx(rows.map((r) => r.id))}
        and not exists (select 1 from captures c where c.hold_id = h.id and c.status = 'pending')
      returning *`;
  });
  for (const hold of due) {
    await finishRelease(deps, hold, background(`expiry-${hold.id}`)).catch((err: unknown) =>
      log.warn({ hold_id: hold.id, err: (err as Error).message }, "expiry release failed; recovery will finish it"),
    );
  }
  return due.length;
}

/** Operations recovery finished, by kind; summed over replicas it counts each operation once. */
const recovered = new Counter({
  name: "hold_recovered_operations_total",
  help: "Unfinished hold operations (creating, releasing, pending captures) that recovery finished.",
  labelNames: ["operation"],
  registers: [metricsRegistry],
});

/** At most this many operations of each kind per pass. */
const RECOVERY_BATCH = 100;

/**
 * How long a claim keeps other replicas off an operation: far longer than a pass of RECOVERY_BATCH
 * takes, so no operation is claimed again while it is being finished; an operation whose replica
 * stopped waits this long. A failed finish gives its claim up at once.
 */
const RECOVERY_LEASE_S = 60;

/**
 * Finishes operations a crashed process left half done: holds in `creating` or `releasing`
 * and pending captures older than `olderThanMs`. Each pass first claims what it will finish with a
 * lease (skipping rows another replica is claiming), so replicas share the work
 * instead of repeating it; a replica that stops mid-pass leaves leases that run out, and the next
 * pass anywhere takes those rows. Every step is idempotent, so finishing work that is in fact still
 * running elsewhere is harmless, only wasted.
 */
export async function recover(deps: HoldDeps, olderThanMs: number): Promise<number> {
  const { sql, log } = deps;
  let finished = 0;
  const stale = sql`now() - make_interval(secs => ${olderThanMs / 1000})`;
  const lease = sql`now() + make_interval(secs => ${RECOVERY_LEASE_S})`;
  const claimable = sql`(recovery_lease_until is null or recovery_lease_until < now())`;
  const claimHolds = (status: "creating" | "releasing") => sql<HoldRow[]>`
    update holds set recovery_lease_until = ${lease}
    where id in (
      select id from holds where status = ${status} and updated_at < ${stale} and ${claimable}
      order by updated_at limit ${RECOVERY_BATCH} for update skip locked)
    returning *`;
  const done = (operation: string) => () => {
    finished++;
    recovered.inc({ operation });
  };
  // A finish that failed (the ledger unreachable, say) is tried again by the next pass anywhere.
  const giveUp = (table: "holds" | "captures", id: string) =>
    sql`update ${sql(table)} set recovery_lease_until = null where id = ${id}`.catch(() => {});

  for (const hold of await claimHolds("creating")) {
    await finishCreate(deps, hold, background(`recovery-${hold.id}`)).then(done("create"), (err: unknown) => {
      log.warn({ hold_id: hold.id, err: (err as Error).message }, "could not finish a hold's creation");
      return giveUp("holds", hold.id);
    });
  }
  const captures = await sql<CaptureRow[]>`
    update captures set recovery_lease_until = ${lease}
    where id in (
      select id from captures where status = 'pending' and created_at < ${stale} and ${claimable}
      order by created_at limit ${RECOVERY_BATCH} for update skip locked)
    returning *`;
  for (const capture of captures) {
    const [hold] = await sql<HoldRow[]>`select * from holds where id = ${capture.hold_id}`;
    await finishCapture(deps, hold!, capture, background(`recovery-${capture.id}`)).then(done("capture"), (err: unknown) => {
      log.warn({ capture_id: capture.id, err: (err as Error).message }, "could not finish a capture");
      return giveUp("captures", capture.id);
    });
  }
  for (const hold of await claimHolds("releasing")) {
    await finishRelease(deps, hold, background(`recovery-${hold.id}`)).then(done("release"), (err: unknown) => {
      log.warn({ hold_id: hold.id, err: (err as Error).message }, "could not finish a release");
      return giveUp("holds", hold.id);
    });
  }
  if (finished > 0) log.info({ finished }, "recovered unfinished hold operations");
  return finished;
}
