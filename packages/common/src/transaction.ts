import { sqlState, type Sql, type Tx } from "./db.js";

// A deadlock victim (40P01) or a serialization failure (40001) is a transaction Postgres rolled
// back whole because of a concurrent one; run again, it sees the other's outcome and goes through.
const RETRYABLE = new Set(["40P01", "40001"]);

/** How many times a transaction runs at most before its conflict reaches the caller. */
export const TRANSACTION_ATTEMPTS = 5;

/**
 * Runs `work` in a transaction, and again, after a short random pause, when it lost a deadlock or
 * a serialization conflict, up to `attempts` runs in all: the client gets the outcome, not the
 * collision. `work` must do nothing outside the transaction that cannot be repeated.
 */
export async function transaction<T>(sql: Sql, work: (tx: Tx) => Promise<T>, attempts = TRANSACTION_ATTEMPTS): Promise<T> {
  return retried(async () => (await sql.begin(work)) as T, attempts);
}

/** Runs `run`, one whole transaction, again when Postgres rolled it back for a conflict, as `transaction` does. */
export async function retried<T>(run: () => Promise<T>, attempts = TRANSACTION_ATTEMPTS): Promise<T> {
  for (let n = 1; ; n++) {
    try {
      return await run();
    } catch (err) {
      if (n >= attempts || !RETRYABLE.has(sqlState(err) ?? "")) throw err;
      // Random, so two transactions that collided do not start again in step.
      await new Promise((resolve) => setTimeout(resolve, Math.random() * 20 * n));
    }
  }
}
