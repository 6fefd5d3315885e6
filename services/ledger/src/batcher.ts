import { create, fromBinary, toBinary, type DescMessage, type MessageInitShape, type MessageShape } from "@bufbuild/protobuf";
import { ConnectError } from "@connectrpc/connect";
import { claimIdempotencyKeys, pipelinedTransaction, settleIdempotencyKeys, type Logger, type Outbox, type Sql, type Tx } from "@ledger/common";
import { Counter, Histogram } from "prom-client";
import { metricsRegistry } from "@ledger/common";
import { applyCommands, ExternalEntityCache, type MoneyCommand, type Outcome } from "./money.js";

const batchSize = new Histogram({
  name: "ledger_batch_commands",
  help: "Money commands applied per database transaction (group commit).",
  buckets: [1, 2, 4, 8, 16, 32, 64, 128, 256],
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

/** The successful outcome of a command. */
export type Applied = Extract<Outcome, { ok: true }>;

/** One caller's money command, with what is needed to answer it and to remember its key. */
export interface Submission<O extends DescMessage> {
  command: MoneyCommand;
  idempotency?: { accountId: string; key: string; fingerprint: Buffer };
  responseSchema: O;
  /** Builds the response from the outcome; runs inside the transaction, before the key is stored. */
  respond(outcome: Applied): MessageInitShape<O>;
}

/** What the caller gets: the response, and whether it is a stored one replayed. */
export interface Answer<O extends DescMessage> {
  response: MessageShape<O>;
  replayed: boolean;
}

interface Waiting {
  submission: Submission<DescMessage>;
  /** When it was queued (performance.now()), for the linger. */
  queuedAt: number;
  resolve(answer: Answer<DescMessage>): void;
  reject(err: unknown): void;
}

/** Settings of group commit. */
export interface BatcherOptions {
  sql: Sql;
  outbox: Outbox;
  log: Logger;
  /** Most commands in one transaction. */
  maxBatch: number;
  /** Transactions in flight at once; commands arriving meanwhile wait and go together. */
  maxInFlight: number;
  /**
   * While another transaction is in flight, how long a new one waits for company before it starts
   * with fewer than `maxBatch` commands. 0 starts at once.
   */
  lingerMs: number;
}

/**
 * Group commit. Commands queue here and are applied many to a transaction by `applyCommands`.
 * With nothing in flight a command starts at once, so a lone request waits for nobody. While
 * transactions are in flight, a new one starts when `maxBatch` commands are queued or the oldest
 * has waited `lingerMs`: without that wait, the callers answered by one batch come back one by one
 * and each takes a free slot alone, and most transactions carry a single command.
 *
 * A batch is one `pipelinedTransaction`: BEGIN goes out with its first read and COMMIT right
 * behind its writes, so it waits on Postgres twice however many commands it holds.
 *
 * Each command keeps its own result: a refused one answers its caller and changes nothing (its
 * idempotency claim is deleted before commit). Lock order stays global: idempotency keys sorted,
 * then groups, reservations, ordinary entities, external entities (inside applyCommands).
 * A transaction that fails as a whole (a database error) is retried one command at a time, so one
 * bad command cannot fail its neighbours.
 */
export function createBatcher(options: BatcherOptions) {
  const { sql, outbox, log } = options;
  const externals = new ExternalEntityCache();
  const queue: Waiting[] = [];
  let inFlight = 0;
  let lingerTimer: NodeJS.Timeout | undefined;

  function keyOf(w: Waiting): string | undefined {
    const i = w.submission.idempotency;
    return i ? `${i.accountId}\u0000${i.key}` : undefined;
  }

  /** Takes the next batch; a second use of one idempotency key waits for the next batch. */
  function takeBatch(): Waiting[] {
    const batch: Waiting[] = [];
    const keys = new Set<string>();
    for (let i = 0; i < queue.length && batch.length < options.maxBatch; ) {
      const key = keyOf(queue[i]!);
      if (key !== undefined && keys.has(key)) {
        i++;
        continue;
      }
      if (key !== undefined) keys.add(key);
      batch.push(queue.splice(i, 1)[0]!);
    }
    return batch;
  }

  function pump() {
    while (inFlight < options.maxInFlight && queue.length > 0) {
      if (inFlight > 0 && queue.length < options.maxBatch) {
        const waited = performance.now() - queue[0]!.queuedAt;
        if (waited < options.lingerMs) {
          lingerTimer ??= setTimeout(() => {
            lingerTimer = undefined;
            pump();
          }, Math.ceil(options.lingerMs - waited));
          return;
        }
      }
      const batch = takeBatch();
      inFlight++;
      void run(batch).finally(() => {
        inFlight--;
        pump();
      });
    }
  }

  async function run(batch: Waiting[]): Promise<void> {
    batchSize.observe(batch.length);
    const endTimer = batchDuration.startTimer();
    let answers: Array<Answer<DescMessage> | ConnectError>;
    try {
      answers = await pipelinedTransaction(sql, (tx, writes) => applyBatch(tx, batch, writes));
      endTimer();
    } catch (err) {
      if (batch.length === 1) {
        batch[0]!.reject(err);
        return;
      }
      batchFallbacks.inc();
      log.warn({ err: (err as Error).message, commands: batch.length }, "batch failed as a whole; applying its commands one by one");
      await Promise.all(batch.map((w) => run([w])));
      return;
    }
    outbox.wake();
    batch.forEach((w, i) => {
      const answer = answers[i]!;
      if (answer instanceof ConnectError) w.reject(answer);
      else w.resolve(answer);
    });
  }

  async function applyBatch(tx: Tx, batch: Waiting[], writes: Promise<unknown>[]): Promise<Array<Answer<DescMessage> | ConnectError>> {
    const answers: Array<Answer<DescMessage> | ConnectError | undefined> = new Array(batch.length);
    // Claims first, in key order, so two batches never wait on each other's keys in a cycle.
    const keyed = batch
      .map((w, i) => ({ w, i, key: keyOf(w) }))
      .filter((x) => x.key !== undefined)
      .sort((a, b) => (a.key! < b.key! ? -1 : a.key! > b.key! ? 1 : 0));
    const claims = await claimIdempotencyKeys(tx, keyed.map(({ w }) => w.submission.idempotency!));
    keyed.forEach(({ w, i }, n) => {
      const claim = claims[n]!;
      if (claim instanceof Error) answers[i] = ConnectError.from(claim);
      else if (claim.kind === "replay") answers[i] = { response: fromBinary(w.submission.responseSchema, claim.response), replayed: true };
    });
    const live = batch.map((w, i) => ({ w, i })).filter(({ i }) => answers[i] === undefined);
    if (live.length === 0) return answers as Array<Answer<DescMessage> | ConnectError>;
    const { outcomes, written } = await applyCommands(tx, live.map(({ w }) => w.submission.command), externals, (events) => outbox.rowsOf(events));
    writes.push(written);
    const completed: Array<{ accountId: string; key: string; response: Uint8Array }> = [];
    const refused: Array<{ accountId: string; key: string }> = [];
    live.forEach(({ w, i }, n) => {
      const outcome = outcomes[n]!;
      const idem = w.submission.idempotency;
      if (!outcome.ok) {
        if (idem) refused.push(idem);
        answers[i] = outcome.error;
        return;
      }
      const response = create(w.submission.responseSchema, w.submission.respond(outcome));
      if (idem) completed.push({ accountId: idem.accountId, key: idem.key, response: toBinary(w.submission.responseSchema, response) });
      answers[i] = { response, replayed: false };
    });
    writes.push(...settleIdempotencyKeys(tx, completed, refused));
    return answers as Array<Answer<DescMessage> | ConnectError>;
  }

  return {
    /** Queues a command and resolves with its own answer once its transaction committed. */
    submit<O extends DescMessage>(submission: Submission<O>): Promise<Answer<O>> {
      return new Promise<Answer<O>>((resolve, reject) => {
        queue.push({
          submission: submission as unknown as Submission<DescMessage>,
          queuedAt: performance.now(),
          resolve: resolve as (a: Answer<DescMessage>) => void,
          reject,
        });
        pump();
      });
    },
  };
}
