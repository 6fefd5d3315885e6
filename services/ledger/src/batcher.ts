// Group commit: the queue money commands wait in, and what their callers get back.
import { fromBinary, type DescMessage, type MessageInitShape, type MessageShape } from "@bufbuild/protobuf";
import { ConnectError } from "@connectrpc/connect";
import { createGroupScheduler, type GroupCommitSettings, type Logger, type Outbox } from "@ledger/common";
import { runBatch, type BatchRunner } from "./batch-paths.js";
import type { BatchStore } from "./batch-store.js";
import {
  keyString,
  type Answer,
  type BatchSubmission,
  type ItemAnswer,
  type Submission,
  type Unit,
  type UnitResult,
} from "./batch-units.js";

/**
 * Settings of group commit: the scheduler's (`maxBatch` counts commands, a batch call's items each,
 * and a call larger than it goes alone), and where its transactions run.
 */
export interface BatcherOptions extends GroupCommitSettings {
  /** Where batches are applied: Postgres and the process's entity cache (`postgresBatchStore`). */
  store: BatchStore;
  outbox: Pick<Outbox, "wake">;
  log: Logger;
  /**
   * A cached batch may rest on the rows another batch has sent and not yet committed, and go to
   * Postgres right behind it (docs/decisions/chained-writes.md). Off unless set.
   */
  chainedWrites?: boolean;
}

/**
 * The account a unit acts for: every item of one call is its caller's. A unit whose items were all
 * refused before they got here and that has no key touches no account's rows: "" then.
 */
function accountOf(unit: Pick<Unit, "items" | "idempotency">): string {
  for (const item of unit.items) if (!(item.command instanceof ConnectError)) return item.command.accountId;
  return unit.idempotency?.accountId ?? unit.items.find((item) => item.idempotency)?.idempotency?.accountId ?? "";
}

/** A unit's idempotency keys (items' and the call's), so each key is claimed once per transaction. */
function keysOf(unit: Pick<Unit, "items" | "idempotency">): string[] {
  const keys = unit.items.flatMap((item) => (item.idempotency ? [keyString(item.idempotency)] : []));
  if (unit.idempotency) keys.push(keyString(unit.idempotency));
  return keys;
}

/**
 * Group commit. Units of work (a single call's command, or a batch call's items) queue here and
 * are applied many to a transaction. With nothing in flight a transaction starts at the end of the
 * event loop's turn with every unit queued in it, so a lone request waits for nobody. While
 * transactions are in flight, a new one starts when `maxBatch` commands are queued or the oldest
 * has waited `lingerMs`: without that wait, the callers answered
 * by one batch come back one by one and each takes a free slot alone, and most transactions carry
 * a single command.
 *
 * A transaction is one `pipelinedTransaction`: BEGIN goes out with its first read and COMMIT right
 * behind its writes, so it waits on Postgres twice however many commands it holds: one statement
 * claims every idempotency key, one locked read per kind of row loads what all commands need
 * (money-load.ts), the rules run in memory (money-rules.ts), and one statement writes it all.
 * Which way a batch goes, cached or locked, is batch-paths.ts; how its units apply, batch-apply.ts.
 *
 * Commands apply in queue order, a batch's items in request order, as if sent one after the other.
 * Each keeps its own result: a refused one changes nothing (its key's claim is deleted before
 * commit). An atomic unit (a single call, or a batch with `atomic`) applies all its items or, at
 * its first refused item, none. Lock order stays global: idempotency keys sorted, then groups,
 * reservations, ordinary entities, external entities. A transaction that fails as a whole (a
 * database error) is retried one unit at a time, so one bad unit cannot fail its neighbours.
 *
 * With `oneAccountPerTransaction` (LEDGER_BATCH_ONE_ACCOUNT) a transaction holds one account's units
 * only, what a distributed Postgres needs to commit it on one node (docs/scaling.md); a batch call
 * is one account's, so it still goes whole in one transaction.
 */
export function createBatcher(options: BatcherOptions) {
  const runner: BatchRunner = {
    store: options.store,
    maxInFlight: options.maxInFlight,
    log: options.log,
    outbox: options.outbox,
    chainedWrites: options.chainedWrites === true,
  };
  const scheduler = createGroupScheduler<Unit>(Object.assign({}, options, { run: (units: Unit[]) => runBatch(runner, units) }));

  function enqueue(unit: Omit<Unit, "queuedAt" | "keys" | "size" | "account" | "resolve" | "reject">): Promise<UnitResult> {
    return new Promise<UnitResult>((resolve, reject) => {
      // Every field written out, not `{ ...unit, ... }`: V8 makes a new hidden class for each
      // property after a spread, on every call (docs/decisions/hidden-classes-per-call.md).
      scheduler.enqueue({
        items: unit.items,
        atomic: unit.atomic,
        idempotency: unit.idempotency,
        respondWhole: unit.respondWhole,
        queuedAt: performance.now(),
        keys: keysOf(unit),
        size: unit.items.length,
        account: accountOf(unit),
        resolve,
        reject,
      });
    });
  }

  return {
    /** Queues one command and resolves with its own answer once its transaction committed. */
    async submit<O extends DescMessage>(submission: Submission<O>): Promise<Answer<O>> {
      const result = await enqueue({ items: [submission as unknown as Submission<DescMessage>], atomic: true });
      if ("refused" in result) throw result.refused.error;
      if ("error" in result) throw result.error;
      if ("replay" in result) throw new Error("a single call has no whole-call key");
      const answer = result.answers[0]!;
      if (answer instanceof ConnectError) throw answer;
      return answer as Answer<O>;
    },

    /**
     * Queues a batch call's items as one unit, applied in order in one transaction, and resolves
     * with the whole response; an atomic batch with a refused item rejects with `AtomicRefusal`.
     */
    async submitBatch<O extends DescMessage>(batch: BatchSubmission<O>): Promise<Answer<O>> {
      const result = await enqueue({
        items: batch.items,
        atomic: batch.atomic,
        ...(batch.idempotency ? { idempotency: batch.idempotency } : {}),
        respondWhole: { schema: batch.responseSchema, respond: batch.respond as (answers: ItemAnswer[]) => MessageInitShape<DescMessage> },
      });
      if ("refused" in result) throw result.refused;
      if ("error" in result) throw result.error;
      if ("replay" in result) return { response: fromBinary(batch.responseSchema, result.replay), replayed: true };
      return { response: result.whole as MessageShape<O>, replayed: false };
    },
  };
}
