// The delivery loop of a notification process: turns, the pause before a destination another
// process holds, the wake from other processes that freed slots, and a stop that drains.
import { randomUUID } from "node:crypto";
import { backgroundLoop, type Sql } from "@ledger/common";
import { attempt, type AttemptOptions } from "./delivery-attempt.js";
import type { Claimed } from "./delivery-claim.js";
import { SendingSlots } from "./delivery-slots.js";
import { DeliveryTurns, SLOTS_FREED_CHANNEL } from "./delivery-turn.js";

/** Settings of the delivery workers. */
export interface WorkerOptions extends AttemptOptions {
  sql: Sql;
  /** Attempts in flight at once in this process, over every destination. */
  concurrency: number;
  /** How often to look for due work when nothing woke the loop. */
  pollMs?: number;
  /**
   * The pause before looking again at a destination another process holds: `firstMs`, doubling
   * while it stays held, at most `maxMs` (default 2 ms up to 50 ms). Tests lengthen it to see the
   * other process's wake alone.
   */
  contendedPauseMs?: { firstMs: number; maxMs: number };
}

/** The delivery loop of one process. */
export interface Worker {
  start(): void;
  /** Looks for due work now, for example right after events arrived. */
  wake(): void;
  /** Stops claiming and waits for the attempts in flight. */
  stop(): Promise<void>;
}

// The pause before looking again at a destination another process holds (its lock for one turn,
// or its slots until that process's next outcomes): a freed slot usually wakes the loop through
// SLOTS_FREED_CHANNEL first, so the pause only covers a lost notification or a lock held by a
// turn that wrote nothing. Capped well below the idle poll: with a cap as long as the poll, two
// processes sharing one destination took turns, each waiting out most of a pause
// (docs/decisions/webhook-delivery-turns.md).
const CONTENDED_PAUSE_MS = { firstMs: 2, maxMs: 50 };

/**
 * Creates the workers. Each turn of the loop is one short transaction that writes the outcomes of
 * the attempts answered since the last turn and claims many due deliveries at once, setting a
 * lease (lease_id, and next_attempt_at pushed past the attempt's timeout) before it commits:
 * another process then sees them as not due, so no attempt is sent twice, and a process that
 * dies mid-attempt only leaves leases that run out and are retried (delivery-turn.ts). Per
 * destination, at most its `max_concurrency` attempts are leased at once across every process
 * (delivery-claim.ts).
 */
export function createWorker(options: WorkerOptions): Worker {
  const { sql, log } = options;
  const contendedPause = options.contendedPauseMs ?? CONTENDED_PAUSE_MS;
  // Names this process in its own notifications, which it ignores.
  const workerId = randomUUID();
  // A wake that comes while the loop is busy claiming is kept by the loop, so it looks again at
  // once instead of sleeping through the slots that attempt freed.
  const wake = () => loop.wake();
  const slots = new SendingSlots(wake);
  const turns = new DeliveryTurns(sql, { workerId, leaseMs: options.timeoutMs + 30_000, sending: (id) => slots.to(id) }, wake);
  // Attempts from claim to written outcome, which stop() waits for.
  const inFlight = new Set<Promise<void>>();
  // Pause before looking again at destinations another process holds; doubles while they stay held.
  let contendedMs = 0;

  /** Sends one claimed attempt; its slot frees when the answer arrives (or the attempt fails). */
  function launch(c: Claimed): void {
    const answered = slots.take(c.endpoint_id);
    const p: Promise<void> = attempt(options, c, answered, (outcome) => turns.record(outcome))
      .catch((err: unknown) =>
        log.error({ err, delivery_id: c.id }, "recording a delivery attempt failed; the lease will run out and it is retried"),
      )
      .finally(() => {
        answered();
        inFlight.delete(p);
      });
    inFlight.add(p);
  }

  /** One turn, then what the loop does next: at once, after a short pause, or its idle poll. */
  async function iteration(): Promise<boolean | number> {
    const free = options.concurrency - slots.size;
    if (free <= 0 && turns.waiting === 0) {
      // Every slot is busy: wait for one to free. Not an idle sleep, which a wake noted while the
      // slots are full would end at once, making the loop spin on microtasks alone, starving the
      // process's timers and sockets until it runs out of memory.
      await slots.oneFrees();
      return true;
    }
    const { claimed, contended } = await turns.turn(free);
    for (const c of claimed) launch(c);
    contendedMs = contended ? Math.min(Math.max(2 * contendedMs, contendedPause.firstMs), contendedPause.maxMs) : 0;
    // Fewer than asked: nothing more is due that this process may take. Wait for an answer (a
    // slot), for new events, or, when another process holds a destination, a short while.
    if (claimed.length < free) return contendedMs || false;
    return true;
  }

  const loop = backgroundLoop({
    name: "delivery worker",
    log,
    iteration,
    idleMs: options.pollMs ?? 250,
    backoff: { firstMs: 400, maxMs: 2_000 },
    failureMessage: "cannot claim deliveries; retrying",
    // A turn may wait for a free slot, at most one attempt's timeout.
    stallWarnMs: options.timeoutMs + 60_000,
  });

  // Another process freed leases: worth a look now if the last turn found a destination held.
  let listening: Promise<{ unlisten(): Promise<void> } | undefined> = Promise.resolve(undefined);
  function listenForFreedSlots(): void {
    listening = sql
      .listen(SLOTS_FREED_CHANNEL, (from) => {
        if (from !== workerId && contendedMs > 0) wake();
      })
      .catch((err: unknown) => {
        // Without it the contended pause still bounds the wait; postgres.js re-listens after a reconnect.
        log.warn({ err: (err as Error).message }, "cannot listen for other processes' freed delivery slots; polling instead");
        return undefined;
      });
  }

  return {
    start() {
      listenForFreedSlots();
      loop.start();
    },
    wake,
    async stop() {
      await (await listening)?.unlisten().catch(() => {});
      await loop.stop();
      await slots.allFree();
      await turns.flush();
      await Promise.allSettled([...inFlight]);
    },
  };
}
