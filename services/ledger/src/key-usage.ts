import type { Logger, Sql } from "@ledger/common";

/** Remembers which API keys were used, and writes `last_used_at` in batches. */
export interface KeyUsage {
  /** Notes that `keyId` authenticated a request now; costs no database write. */
  record(keyId: string): void;
  /** Writes what was noted since the last flush, in one statement. */
  flush(): Promise<void>;
  /** Stops the timer and writes what is left. */
  stop(): Promise<void>;
}

/**
 * `last_used_at` without a write per request: uses are noted in memory and written every
 * `flushEveryMs` (LEDGER_KEY_USAGE_FLUSH_MS, a minute by default) in one multi-row UPDATE, so
 * a key's row is written at most once per interval per ledger process, however busy the key.
 * The column is therefore as fresh as the interval (plus the few seconds a key stays in the
 * other services' caches, whose look-ups are what the ledger sees of their traffic). A process
 * that dies loses at most one interval of notes, which only makes `last_used_at` older.
 */
export function createKeyUsage(options: { sql: Sql; log: Logger; flushEveryMs: number }): KeyUsage {
  const { sql, log } = options;
  let pending = new Map<string, Date>();
  let flushing: Promise<void> = Promise.resolve();

  const write = async () => {
    if (pending.size === 0) return;
    const batch = pending;
    pending = new Map();
    const ids = [...batch.keys()];
    const times = ids.map((id) => batch.get(id)!.toISOString());
    try {
      // Never moves the time back: another replica may have written a later use already.
      await sql`
        update api_keys k set last_used_at = u.used_at
        from unnest(${sql.array(ids)}::text[], ${sql.array(times)}::timestamptz[]) as u(id, used_at)
        where k.id = u.id and (k.last_used_at is null or k.last_used_at < u.used_at)`;
    } catch (err) {
      // Put the notes back (a later use of a key wins), so the next flush tries them again.
      for (const [id, at] of batch) if (!pending.has(id)) pending.set(id, at);
      log.warn({ err: (err as Error).message, keys: ids.length }, "writing API key last_used_at failed; retrying at the next flush");
    }
  };
  const flush = () => (flushing = flushing.then(write));
  const timer = setInterval(() => void flush(), options.flushEveryMs);
  timer.unref();

  return {
    record(keyId) {
      pending.set(keyId, new Date());
    },
    flush,
    async stop() {
      clearInterval(timer);
      await flush();
    },
  };
}
