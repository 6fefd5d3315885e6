/** What the group-commit scheduler needs of a queued piece of work. */
export interface Queued {
  /** When it was queued (performance.now()), for the linger. */
  queuedAt: number;
  /** What it touches (idempotency keys, a hold id): two pieces sharing one never go together. */
  keys: readonly string[];
  /** How much of a transaction's budget it takes (a batch call's items; one for a single step). */
  size: number;
  /** The account it acts for, which `oneAccountPerTransaction` keeps a transaction to. */
  account?: string;
}

/** How a group-commit scheduler forms its transactions; services take these from their configuration. */
export type GroupCommitSettings = Omit<GroupSchedulerOptions<Queued>, "run">;

/** Settings of a group-commit scheduler. */
export interface GroupSchedulerOptions<J extends Queued> {
  /** Most size in one transaction; a single piece larger than this goes alone. */
  maxBatch: number;
  /** Transactions in flight at once; work arriving meanwhile waits and goes together. */
  maxInFlight: number;
  /** While another transaction is in flight, how long a new one waits for company (ms). */
  lingerMs: number;
  /**
   * Two transactions in turn: once more than this is outstanding (queued and in flight), one
   * transaction takes at most half of what is outstanding, and never less than this; so while one
   * is in the database, the process reads the next one's requests and answers the last one's,
   * instead of every caller waiting in one transaction and the database waiting for all of them
   * between (docs/decisions/two-transactions-in-turn.md). Unset or 0: one takes all that is
   * queued, up to `maxBatch`.
   */
  halfAbove?: number;
  /**
   * A transaction takes the pieces of one account only: the first piece's, then the later ones of
   * the same account, skipping the others, which go in transactions of their own (side by side, up
   * to `maxInFlight`). What a distributed Postgres needs to commit each on one node, without a
   * two-phase commit (docs/scaling.md).
   */
  oneAccountPerTransaction?: boolean;
  /** Runs one transaction of the pieces taken; it answers each piece itself and never rejects. */
  run(jobs: J[]): Promise<void>;
}

/**
 * The scheduling half of group commit, shared by the ledger's batcher and the hold service: work
 * queues here and goes to the database in transactions of many pieces. With nothing in flight a
 * transaction starts at the end of the event loop's turn with every piece queued in it, so a lone
 * request waits for nobody. While transactions are in flight, a new one starts when `maxBatch`
 * worth of work is queued or the oldest piece has waited `lingerMs`:
 * without that wait, the pieces answered by one commit would trickle back one at a time and each
 * take a transaction of its own. Pieces keep their queue order; one whose keys collide with a piece
 * already taken waits for the next transaction, so a key is claimed or a row read once per transaction.
 */
export function createGroupScheduler<J extends Queued>(options: GroupSchedulerOptions<J>): { enqueue(job: J): void } {
  const queue: J[] = [];
  let queuedSize = 0;
  let inFlight = 0;
  /** The size of the work in the transactions in flight. */
  let runningSize = 0;
  let lingerTimer: NodeJS.Timeout | undefined;
  let pumpScheduled = false;

  function take(): { jobs: J[]; size: number } {
    const taken: J[] = [];
    const keys = new Set<string>();
    let size = 0;
    const half = !options.halfAbove ? Infinity : Math.max(options.halfAbove, Math.ceil((queuedSize + runningSize) / 2));
    const most = Math.min(options.maxBatch, half);
    for (let i = 0; i < queue.length && size < most; ) {
      const job = queue[i]!;
      const fits = taken.length === 0 || size + job.size <= most;
      const otherAccount = options.oneAccountPerTransaction === true && taken.length > 0 && job.account !== taken[0]!.account;
      if (!fits || otherAccount || job.keys.some((k) => keys.has(k))) {
        i++;
        continue;
      }
      for (const k of job.keys) keys.add(k);
      size += job.size;
      queuedSize -= job.size;
      taken.push(queue.splice(i, 1)[0]!);
    }
    return { jobs: taken, size };
  }

  function pump() {
    while (inFlight < options.maxInFlight && queue.length > 0) {
      if (inFlight > 0 && queuedSize < options.maxBatch) {
        const waited = performance.now() - queue[0]!.queuedAt;
        if (waited < options.lingerMs) {
          if (lingerTimer === undefined) {
            lingerTimer = setTimeout(
              () => {
                lingerTimer = undefined;
                pump();
              },
              Math.ceil(options.lingerMs - waited),
            );
          }
          return;
        }
      }
      const { jobs, size } = take();
      inFlight++;
      runningSize += size;
      void options.run(jobs).finally(() => {
        inFlight--;
        runningSize -= size;
        pump();
      });
    }
  }

  // The queue is looked at once the event loop has run every callback of its current turn: the
  // requests whose bytes arrived together (many HTTP/2 streams in one read, a burst of answers
  // from one commit) then go in one transaction instead of the first alone and the rest after it.
  // A lone request waits only for the end of the turn it arrived in.
  function schedulePump() {
    if (pumpScheduled) return;
    pumpScheduled = true;
    setImmediate(() => {
      pumpScheduled = false;
      pump();
    });
  }

  return {
    enqueue(job) {
      queue.push(job);
      queuedSize += job.size;
      schedulePump();
    },
  };
}
