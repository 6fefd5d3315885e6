import { create, fromBinary, toBinary, type DescMessage, type MessageInitShape, type MessageShape } from "@bufbuild/protobuf";
import { ConnectError } from "@connectrpc/connect";
import { claimIdempotencyKey, completeIdempotencyKey, type Logger, type Outbox, type Sql, type Tx } from "@ledger/common";
import { Counter, Histogram } from "prom-client";
import { metricsRegistry } from "@ledger/common";
import { applyCommands, ExternalEntityCache, type MoneyCommand, type Outcome } from "./money.js";

const batchSize = new Histogram({
  name: "ledger_batch_commands",
  help: "Money commands applied per database transaction (group commit).",
  buckets: [1, 2, 4, 8, 16, 32, 64, 128, 256],
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
}

/**
 * Group commit. Commands queue here; whenever fewer than `maxInFlight` transactions are running,
 * everything queued (up to `maxBatch`) is applied in one transaction by `applyCommands`. At low
 * load a command runs alone at once; under load, commands that arrive while transactions are in
 * flight share the next one, so the commit cost is paid once per batch, not once per request.
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
    let answers: Array<Answer<DescMessage> | ConnectError>;
    try {
      answers = await sql.begin((tx) => applyBatch(tx, batch));
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

  async function applyBatch(tx: Tx, batch: Waiting[]): Promise<Array<Answer<DescMessage> | ConnectError>> {
    const answers: Array<Answer<DescMessage> | ConnectError | undefined> = new Array(batch.length);
    // Claims first, in key order, so two batches never wait on each other's keys in a cycle.
    const keyed = batch
      .map((w, i) => ({ w, i, key: keyOf(w) }))
      .filter((x) => x.key !== undefined)
      .sort((a, b) => (a.key! < b.key! ? -1 : a.key! > b.key! ? 1 : 0));
    for (const { w, i } of keyed) {
      const { accountId, key, fingerprint } = w.submission.idempotency!;
      try {
        const claim = await claimIdempotencyKey(tx, accountId, key, fingerprint);
        if (claim.kind === "replay") answers[i] = { response: fromBinary(w.submission.responseSchema, claim.response), replayed: true };
      } catch (err) {
        answers[i] = ConnectError.from(err);
      }
    }
    const live = batch.map((w, i) => ({ w, i })).filter(({ i }) => answers[i] === undefined);
    if (live.length > 0) {
      const { outcomes } = await applyCommands(tx, live.map(({ w }) => w.submission.command), externals, (events) => outbox.rowsOf(events));
      for (let n = 0; n < live.length; n++) {
        const { w, i } = live[n]!;
        const outcome = outcomes[n]!;
        const idem = w.submission.idempotency;
        if (!outcome.ok) {
          // A refused request stores nothing: its claim goes, so a retry with the key is tried afresh.
          if (idem) await tx`delete from idempotency_keys where account_id = ${idem.accountId} and key = ${idem.key}`;
          answers[i] = outcome.error;
          continue;
        }
        const response = create(w.submission.responseSchema, w.submission.respond(outcome));
        if (idem) await completeIdempotencyKey(tx, idem.accountId, idem.key, toBinary(w.submission.responseSchema, response));
        answers[i] = { response, replayed: false };
      }
    }
    return answers as Array<Answer<DescMessage> | ConnectError>;
  }

  return {
    /** Queues a command and resolves with its own answer once its transaction committed. */
    submit<O extends DescMessage>(submission: Submission<O>): Promise<Answer<O>> {
      return new Promise<Answer<O>>((resolve, reject) => {
        queue.push({ submission: submission as unknown as Submission<DescMessage>, resolve: resolve as (a: Answer<DescMessage>) => void, reject });
        pump();
      });
    },
  };
}
