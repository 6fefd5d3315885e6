import type { Logger } from "pino";
import { Counter } from "prom-client";
import { metricsRegistry } from "./metrics.js";

const stalls = new Counter({
  name: "background_loop_stalls_total",
  help: "Iterations of a background loop (outbox relay, delivery worker, hold expiry...) that ran past their stall limit.",
  labelNames: ["loop"],
  registers: [metricsRegistry],
});

/** How often a loop looks whether its current iteration has run past `stallWarnMs`. */
const STALL_CHECK_MS = 1_000;

/** What `backgroundLoop` runs, and how it waits between runs. */
export interface BackgroundLoopOptions {
  /** Names the loop in log lines ("outbox relay", "delivery worker"). */
  name: string;
  log: Logger;
  /**
   * One iteration. Resolves true when there may be more work right now (the next iteration starts
   * at once), false when there was none (the loop sleeps `idleMs`, or until `wake`), or a number of
   * milliseconds to sleep instead of `idleMs` (work that will be worth a look sooner, such as rows
   * another process holds for a moment; `wake` cuts it short too). A rejection is a failure: the
   * loop backs off and tries again.
   */
  iteration: () => Promise<boolean | number>;
  /** The sleep after an iteration that found nothing to do; `wake` cuts it short. */
  idleMs: number;
  /** The sleep after the n-th failure in a row: `firstMs`, doubling each time, at most `maxMs`. `wake` does not cut it. */
  backoff: { firstMs: number; maxMs: number };
  /** A pause before the first iteration (default none); only `stop` cuts it short. */
  firstDelayMs?: number;
  /** Called on every failure, for what the loop's owner counts or resets (metrics, a cached state). */
  onFailure?: (err: unknown) => void;
  /** The warning logged when a streak of failures starts (default: "<name> failed; retrying"). */
  failureMessage?: string;
  /**
   * An iteration still running after this long is logged as stalled (an error, and a line when it
   * ends) and counted in `background_loop_stalls_total`: a wait that never returns (a lost
   * answer, a hung socket) would otherwise stop the loop's work without a word. Default 60 s;
   * 0 for a loop whose iteration is meant to last (a subscription).
   */
  stallWarnMs?: number;
}

/** A loop that runs in the background of a process until stopped. */
export interface BackgroundLoop {
  start(): void;
  /**
   * There is new work: cut an idle sleep short. A wake during an iteration is kept, so the loop
   * looks again at once instead of sleeping through the work announced meanwhile.
   */
  wake(): void;
  /** True from `start` until `stop`. */
  readonly running: boolean;
  /** True while the loop sleeps after an iteration that found nothing (a sleep `wake` cuts short). */
  readonly idle: boolean;
  /** Starts no new iteration, cuts any sleep short, and resolves once the current iteration has ended. */
  stop(): Promise<void>;
}

/**
 * Reports the iteration of one loop that runs past its stall limit: an error and a count when it
 * passes the limit, and a line when it ends.
 */
class StallWatch {
  // When the running iteration started (0 between iterations), and whether it was reported stalled.
  private iterationStartedAt = 0;
  private stallReported = false;
  private stallCheck: NodeJS.Timeout | undefined;

  constructor(
    private readonly name: string,
    private readonly log: Logger,
    private readonly stallWarnMs: number,
  ) {}

  /** Starts looking every `STALL_CHECK_MS`, or more often for a shorter limit; a limit of 0 watches nothing. */
  start(): void {
    if (this.stallWarnMs > 0) {
      this.stallCheck = setInterval(() => this.checkStall(), Math.min(STALL_CHECK_MS, this.stallWarnMs));
      this.stallCheck.unref();
    }
  }

  /** Stops looking, when the loop stops. */
  stop(): void {
    clearInterval(this.stallCheck);
  }

  /** An iteration starts: the time it may run before it counts as stalled starts too. */
  iterationStarted(): void {
    this.iterationStartedAt = Date.now();
  }

  /** The iteration ended, well or not: logs the end of a stall it was reported for. */
  iterationEnded(): void {
    const { name, log } = this;
    if (this.stallReported)
      log.info({ loop: name, running_ms: Date.now() - this.iterationStartedAt }, `${name} iteration ended after stalling`);
    this.iterationStartedAt = 0;
    this.stallReported = false;
  }

  /** Reports the running iteration, once, when it has run past the limit. */
  private checkStall(): void {
    if (this.iterationStartedAt === 0 || this.stallReported) return;
    const runningMs = Date.now() - this.iterationStartedAt;
    if (runningMs < this.stallWarnMs) return;
    this.stallReported = true;
    const { name, log } = this;
    stalls.inc({ loop: name });
    log.error({ loop: name, running_ms: runningMs }, `${name} has been stuck in one iteration for ${Math.round(runningMs / 1000)} s`);
  }
}

/**
 * Runs `options.iteration` over and over, in the background, until stopped. Failures are logged
 * once per streak (a warning when it starts, a line when it ends with how many failed), not once
 * per retry, so an outage of a dependency costs two log lines, not one per backoff step.
 */
export function backgroundLoop(options: BackgroundLoopOptions): BackgroundLoop {
  const { log, name, iteration, idleMs, backoff } = options;
  const failureMessage = options.failureMessage ?? `${name} failed; retrying`;
  let running = false;
  let loop: Promise<void> = Promise.resolve();
  let woken = false;
  // The sleep in progress, if any: `endSleep` ends it, and `wake` may when it is an idle one.
  let endSleep: (() => void) | undefined;
  let sleepIsIdle = false;
  const stallWatch = new StallWatch(name, log, options.stallWarnMs ?? 60_000);

  function sleep(ms: number, idle: boolean): Promise<void> {
    if (!running || (idle && woken)) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const timer = setTimeout(done, ms);
      timer.unref();
      function done() {
        clearTimeout(timer);
        endSleep = undefined;
        resolve();
      }
      endSleep = done;
      sleepIsIdle = idle;
    });
  }

  async function run(): Promise<void> {
    if (options.firstDelayMs) await sleep(options.firstDelayMs, false);
    let failures = 0;
    let failingSince = 0;
    while (running) {
      woken = false;
      let more: boolean | number;
      stallWatch.iterationStarted();
      try {
        more = await iteration();
      } catch (err) {
        stallWatch.iterationEnded();
        failures++;
        options.onFailure?.(err);
        if (failures === 1) {
          failingSince = Date.now();
          log.warn({ err: (err as Error).message, loop: name }, failureMessage);
        }
        await sleep(Math.min(backoff.firstMs * 2 ** (failures - 1), backoff.maxMs), false);
        continue;
      }
      stallWatch.iterationEnded();
      if (failures > 0) {
        log.info({ loop: name, after_failures: failures, failing_ms: Date.now() - failingSince }, `${name} works again`);
        failures = 0;
      }
      if (more === false) await sleep(idleMs, true);
      else if (typeof more === "number") await sleep(more, true);
    }
  }

  return {
    start() {
      if (running) return;
      running = true;
      stallWatch.start();
      loop = run();
    },
    wake() {
      woken = true;
      if (sleepIsIdle) endSleep?.();
    },
    get running() {
      return running;
    },
    get idle() {
      return endSleep !== undefined && sleepIsIdle;
    },
    async stop() {
      running = false;
      stallWatch.stop();
      endSleep?.();
      await loop;
    },
  };
}
