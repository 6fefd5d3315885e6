// The ways a batch of group commit (batcher.ts) goes to the database: the cached way (no read, one
// round trip), the locked way (read under lock first), and one unit at a time when a shared
// transaction was refused as a whole.
import { isKnownKeyError, metricsRegistry, refusedByPostgres, sqlState, type Logger, type Sql, type Tx } from "@ledger/common";
import { Counter, Histogram } from "prom-client";
import { applyUnits, RefusedUnclaimedKey } from "./batch-apply.js";
import type { BatchStore, TransactionWork } from "./batch-store.js";
import { commandsOf, finish, type Unit, type UnitResult } from "./batch-units.js";
import { namedEntityIds, type CachedOpenBook, type MoneyCommand, type OpenBook, type WriteChain } from "./money.js";

const batchSize = new Histogram({
  name: "ledger_batch_commands",
  help: "Money commands applied per database transaction (group commit; a batch call counts its items).",
  buckets: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024],
  registers: [metricsRegistry],
});
const batchDuration = new Histogram({
  name: "ledger_batch_seconds",
  help: "Time from a batch's start to its commit, waits for locks and round trips included.",
  buckets: [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1],
  registers: [metricsRegistry],
});
const batchFallbacks = new Counter({
  name: "ledger_batch_fallbacks_total",
  help: "Batches whose transaction failed as a whole and were retried one command at a time.",
  registers: [metricsRegistry],
});

const batchWaits = new Counter({
  name: "ledger_batch_waits_total",
  help: "Times a batch waited for another batch of this process to finish writing rows it names, to go the cached way after it.",
  registers: [metricsRegistry],
});

const batchPaths = new Counter({
  name: "ledger_batch_paths_total",
  help:
    "Batches by how they read their rows: cached (no read; one round trip), chained (cached, and its rows handed on before its commit), locked (read under lock first), " +
    "stale (written on cached rows that had changed: nothing written, applied again as locked), " +
    "known_key (an idempotency key existed: nothing written, applied again as locked, which replays it), " +
    "or keyed_refusal (a command with a key was refused: nothing written, applied again as locked, which claims the key first and replays an earlier success).",
  labelNames: ["path"],
  registers: [metricsRegistry],
});

/**
 * What a batch needs besides its units: where it is applied, how many batches may be in flight at
 * once (which bounds a cached batch's waits), the log, and the outbox to wake once it committed.
 */
export interface BatchRunner {
  store: BatchStore;
  maxInFlight: number;
  log: Logger;
  outbox: { wake(): void };
  /** A cached batch may chain its write behind another's (docs/decisions/chained-writes.md). */
  chainedWrites: boolean;
}

/**
 * Applies `units` in one transaction, the cached way when it can and otherwise the locked way, and
 * answers each unit. A transaction that fails as a whole (a database error) is retried one unit at
 * a time, so one bad unit cannot fail its neighbours. Never rejects: each unit hears its own error.
 */
export async function runBatch(runner: BatchRunner, units: Unit[]): Promise<void> {
  batchSize.observe(units.reduce((n, u) => n + u.items.length, 0));
  const endTimer = batchDuration.startTimer();
  let results: UnitResult[];
  try {
    results = (await runCached(runner, units)) ?? (await runLocked(runner, units));
    endTimer();
  } catch (err) {
    // Only a transaction Postgres refused surely applied nothing. One whose connection failed
    // may have committed before the answer was lost: applying its units again could apply them
    // twice, so each caller hears the error, and a retry with an idempotency key is safe
    // (docs/api.md#idempotency).
    if (units.length === 1 || !refusedByPostgres(err)) {
      for (const unit of units) unit.reject(err);
      return;
    }
    batchFallbacks.inc();
    runner.log.warn({ err: (err as Error).message, units: units.length }, "batch failed as a whole; applying its units one by one");
    await Promise.all(units.map((u) => runBatch(runner, [u])));
    return;
  }
  runner.outbox.wake();
  units.forEach((unit, i) => {
    unit.resolve(finish(unit, results[i]!));
  });
}

/** A cached book as `applyUnits` opens books: its commands are the batch's, its write goes on `on`. */
function openOn(open: CachedOpenBook, on: Sql | Tx, chain: WriteChain | undefined): () => Promise<OpenBook> {
  return () => Promise.resolve({ book: open.book, unitDone: open.unitDone, write: () => open.writeOn(on, chain) });
}

/**
 * Applies `units` on cached rows, written with no read before it, in one round trip
 * (docs/architecture.md#cached-balances). Their idempotency keys are taken as new and inserted
 * with their responses, before the write. Undefined when they need more than the cache holds
 * (anything but transfers, deposits and withdrawals between cached entities), name a key twice,
 * were written on rows that had changed since they were cached, carried a key that exists, or
 * had a keyed command refused (its key may hold an earlier success): then nothing was written,
 * and the caller applies them the usual way, which claims the keys first (and replays a known
 * one) and reads the rows under lock.
 */
async function runCached(runner: BatchRunner, units: Unit[]): Promise<UnitResult[] | undefined> {
  const { store } = runner;
  const commands = commandsOf(units);
  if (commands.length === 0) return undefined;
  const allKeys = units.flatMap((unit) => unit.keys);
  // A key twice in one batch is answered from the first use: the claiming path handles that.
  if (new Set(allKeys).size !== allKeys.length) return undefined;
  const claimed = await cachedBookAfterWrites(runner, commands);
  if (!claimed) return undefined;
  const { open, release, waited } = claimed;
  // Chained when batches overlap: this one waited for another's rows, or another waits for rows
  // now. Once the transaction holds its rows, the rows the write will leave are cached and given
  // back (`release`), before COMMIT is answered (docs/decisions/chained-writes.md). A batch no
  // other overlaps keeps its one statement with no BEGIN or COMMIT: chaining would cost it three
  // more statements and hand its rows to no one.
  const chain: WriteChain | undefined = runner.chainedWrites && (waited || store.cache.waiting > 0) ? { cached: release } : undefined;
  try {
    // No key is claimed, so every unit is live and applyUnits asks for a book over these same
    // commands. With no key and no chain the write is one statement on its own, a transaction
    // with no BEGIN or COMMIT; otherwise the keys' insert, the chain's lock and the write are
    // pipelined between BEGIN and COMMIT: still one round trip.
    const work: TransactionWork<UnitResult[]> = (tx, writes) =>
      applyUnits(tx, units, writes, openOn(open, tx, chain), "insert", store.keys);
    const results = await (allKeys.length === 0 && !chain ? store.alone(work) : store.transaction(work));
    batchPaths.inc({ path: chain ? "chained" : "cached" });
    return results;
  } catch (err) {
    if (sqlState(err) === "40001") batchPaths.inc({ path: "stale" });
    else if (isKnownKeyError(err)) batchPaths.inc({ path: "known_key" });
    else if (err instanceof RefusedUnclaimedKey) batchPaths.inc({ path: "keyed_refusal" });
    else throw err;
    return undefined;
  } finally {
    release();
  }
}

/**
 * A cached book over `commands`, once no other batch of this process is writing the rows it
 * names: it waits for such a batch and then writes on the rows it left. Each wait outlasts a
 * batch in flight, and at most `maxInFlight` are, so that bounds the waits. Undefined when the
 * cache cannot serve the commands, or they are still busy after that many waits. The rows are
 * claimed for writing in the same turn as they are found free (`release` gives them back): a
 * batch started beside this one, in the same turn, then finds them busy and waits, where
 * otherwise both would write on the same cached version and the second would be refused as stale.
 */
async function cachedBookAfterWrites(
  runner: BatchRunner,
  commands: MoneyCommand[],
): Promise<{ open: CachedOpenBook; release: () => void; waited: boolean } | undefined> {
  const { cache } = runner.store;
  for (let waits = 0; ; waits++) {
    const cached = runner.store.openCachedBook(commands);
    if (!cached) return undefined;
    if ("book" in cached) {
      const release = cache.claimWriting(cached.book.rows().flatMap((row) => (row.is_external ? [] : [row.id])));
      return { open: cached, release, waited: waits > 0 };
    }
    if (waits === runner.maxInFlight) return undefined;
    batchWaits.inc();
    await cache.whenWritten(cached.busy);
  }
}

/**
 * Applies `units` in a transaction that reads and locks their rows first. While it runs, the
 * ordinary entities it names, and from its read those of the groups and reservations it changes,
 * count as being written, so no cached batch rests on them meanwhile.
 */
async function runLocked(runner: BatchRunner, units: Unit[]): Promise<UnitResult[]> {
  const { store } = runner;
  const { cache } = store;
  batchPaths.inc({ path: "locked" });
  // Claimed before the transaction waits for a connection, so no cached batch starts on them meanwhile.
  const named = new Set([...namedEntityIds(commandsOf(units))].filter((id) => !cache.external(id)));
  const releases = [cache.claimWriting([...named])];
  try {
    return await store.transaction((tx, writes) =>
      applyUnits(
        tx,
        units,
        writes,
        async (commands) => {
          const open = await store.openBook(tx, commands);
          releases.push(cache.claimWriting(open.book.rows().flatMap((row) => (row.is_external || named.has(row.id) ? [] : [row.id]))));
          return open;
        },
        "claim",
        store.keys,
      ),
    );
  } finally {
    for (const release of releases) release();
  }
}
