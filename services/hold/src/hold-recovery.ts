// The hold service's background work: releasing holds past their expiry, and finishing the
// operations a crashed process left half done. Both repeat steps that are safe to repeat
// (hold-completions.ts), so replicas running them at once never do one hold's work twice.
import { NO_TRACE, type CallOrigin } from "@ledger/common";
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

/**
 * Finishes operations a crashed process left half done: holds in `creating` or `releasing`
 * and pending captures older than `olderThanMs`. Every step is idempotent, so finishing work
 * that is in fact still running elsewhere is harmless.
 */
export async function recover(deps: HoldDeps, olderThanMs: number): Promise<number> {
  const { sql, log } = deps;
  let finished = 0;
  const stale = sql`now() - make_interval(secs => ${olderThanMs / 1000})`;
  for (const hold of await sql<HoldRow[]>`select * from holds where status = 'creating' and updated_at < ${stale} limit 100`) {
    await finishCreate(deps, hold, background(`recovery-${hold.id}`)).then(
      () => finished++,
      (err: unknown) => log.warn({ hold_id: hold.id, err: (err as Error).message }, "could not finish a hold's creation"),
    );
  }
  for (const capture of await sql<CaptureRow[]>`select * from captures where status = 'pending' and created_at < ${stale} limit 100`) {
    const [hold] = await sql<HoldRow[]>`select * from holds where id = ${capture.hold_id}`;
    await finishCapture(deps, hold!, capture, background(`recovery-${capture.id}`)).then(
      () => finished++,
      (err: unknown) => log.warn({ capture_id: capture.id, err: (err as Error).message }, "could not finish a capture"),
    );
  }
  for (const hold of await sql<HoldRow[]>`select * from holds where status = 'releasing' and updated_at < ${stale} limit 100`) {
    await finishRelease(deps, hold, background(`recovery-${hold.id}`)).then(
      () => finished++,
      (err: unknown) => log.warn({ hold_id: hold.id, err: (err as Error).message }, "could not finish a release"),
    );
  }
  if (finished > 0) log.info({ finished }, "recovered unfinished hold operations");
  return finished;
}
