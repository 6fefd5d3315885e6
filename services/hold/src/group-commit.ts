import {
  createGroupScheduler,
  type GroupCommitSettings,
  metricsRegistry,
  pipelinedTransaction,
  refusedByPostgres,
  sentWrites,
  sqlState,
  type Logger,
  type Queued,
  type Sql,
  type Tx,
} from "@ledger/common";
import { Counter, Histogram } from "prom-client";

const batchSize = new Histogram({
  name: "hold_batch_steps",
  help: "Steps (intents and completions of hold operations) committed per database transaction.",
  buckets: [1, 2, 4, 8, 16, 32, 64, 128],
  registers: [metricsRegistry],
});
const batchFallbacks = new Counter({
  name: "hold_batch_fallbacks_total",
  help: "Shared transactions that failed as a whole and were retried one step at a time.",
  registers: [metricsRegistry],
});

/** One step's database work, as `pipelinedTransaction` takes it. */
export type Work<T> = (tx: Tx, writes: Promise<unknown>[]) => Promise<T>;

/** Settings of the hold service's group commit: the scheduler's (`maxBatch` counts steps), and the database. */
export interface GroupCommitOptions extends GroupCommitSettings {
  sql: Sql;
  log: Logger;
}

interface Job extends Queued {
  work: Work<unknown>;
  keys: string[];
  resolve(value: unknown): void;
  reject(err: unknown): void;
}

/**
 * Group commit for the hold service: the intents and completions of concurrent hold operations
 * share database transactions, so many of them cost one BEGIN, one COMMIT (one WAL flush) and one
 * connection. Each step's statements are pipelined on the shared connection, in the order the
 * steps send them.
 *
 * The contract of a step: when its work throws, it has changed nothing that the commit would keep
 * (it refused after reads only, or it pushed into `writes` what undoes its own change). That is how
 * one step's refusal leaves its neighbours alone: the transaction still commits, that step alone
 * answers its error. A transaction that Postgres refused as a whole (a failed write, a deadlock, or
 * any statement that failed even where its step caught the error: Postgres then answers COMMIT with
 * ROLLBACK) is retried one step at a time, so one bad step cannot fail the others.
 *
 * Steps name the things they touch (`keys`: a hold id, an idempotency key): two steps sharing a key
 * never go in one transaction, so a step never reads a row another step of its own transaction is
 * changing half way (a capture's intent reads its hold and its pending captures in two statements).
 * Steps sharing a key in different transactions wait on each other's row locks as before.
 */
export function createGroupCommit(options: GroupCommitOptions) {
  const { sql, log } = options;
  // Rows are locked in the order the steps send their statements: sorted by what they touch (the
  // hold first), concurrent transactions take them in one order and seldom wait on each other in a cycle.
  // The order is by code unit, as `sort()` compares strings: a locale's collation would depend on
  // each process's ICU data, and replicas of different builds would then lock in different orders.
  const firstKey = (job: Job) => job.keys[0] ?? "";
  const byFirstKey = (a: Job, b: Job) => (firstKey(a) < firstKey(b) ? -1 : firstKey(a) > firstKey(b) ? 1 : 0);
  const scheduler = createGroupScheduler<Job>(Object.assign({}, options, { run: (jobs: Job[]) => run(jobs.sort(byFirstKey)) }));

  /**
   * A step's work with writes of its own: they join the transaction's writes once the step is done,
   * whether it answered or refused (a refusal's writes undo its own change). Each gets a handler
   * when it is pushed (sentWrites), so a write that fails while the step still awaits a read, or in
   * a transaction that is rolled back, is not an unhandled rejection.
   */
  async function step(job: Job, tx: Tx, writes: Promise<unknown>[]): Promise<unknown> {
    const own = sentWrites();
    try {
      return await job.work(tx, own);
    } finally {
      writes.push(...own);
    }
  }

  /**
   * One step in a transaction of its own. A deadlock (two transactions taking a client key and a
   * hold in opposite orders) rolled it back whole, so it is tried again, a few times, before the
   * client is told to retry.
   */
  async function runAlone(job: Job): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      try {
        job.resolve(await pipelinedTransaction(sql, (tx, writes) => step(job, tx, writes)));
        return;
      } catch (err) {
        if (sqlState(err) !== "40P01" || attempt === 3) {
          job.reject(err);
          return;
        }
      }
    }
  }

  async function run(jobs: Job[]): Promise<void> {
    batchSize.observe(jobs.length);
    if (jobs.length === 1) return runAlone(jobs[0]!);
    let settled: PromiseSettledResult<unknown>[];
    try {
      settled = await pipelinedTransaction(sql, (tx, writes) => Promise.allSettled(jobs.map((job) => step(job, tx, writes))));
    } catch (err) {
      // Only a transaction Postgres refused surely wrote nothing; after a lost connection it may
      // have committed, and running its steps again could run them twice.
      if (!refusedByPostgres(err)) {
        for (const job of jobs) job.reject(err);
        return;
      }
      batchFallbacks.inc();
      log.warn(
        { err: (err as Error).message, steps: jobs.length },
        "shared transaction failed as a whole; committing its steps one by one",
      );
      await Promise.all(jobs.map(runAlone));
      return;
    }
    jobs.forEach((job, i) => {
      const result = settled[i]!;
      if (result.status === "fulfilled") job.resolve(result.value);
      else job.reject(result.reason);
    });
  }

  return {
    /** Runs `work` in a transaction shared with other steps; resolves once that transaction committed. */
    transaction<T>(keys: string[], work: Work<T>): Promise<T> {
      return new Promise<T>((resolve, reject) => {
        scheduler.enqueue({ work, keys, size: 1, queuedAt: performance.now(), resolve: resolve as (value: unknown) => void, reject });
      });
    },
  };
}

export type GroupCommit = ReturnType<typeof createGroupCommit>;
