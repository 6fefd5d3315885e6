import type { TracingConfig } from "./config.js";
import { createLogger, type Logger } from "./logger.js";
import { startTracing, type Tracing } from "./tracing.js";

/**
 * The order a process closes in: each part that starts registers how to close it, and `close`
 * runs those steps last-started first, so nothing is closed while something started after it
 * still uses it (the RPC server drains before the outbox flushes, the outbox before NATS and the
 * database close, tracing exports last).
 */
export interface Lifecycle {
  readonly log: Logger;
  /** Registers how to close the part just started; `step` names it in the log. */
  onClose(step: string, close: () => unknown): void;
  /** Starts `part` (anything with start and stop: a background loop, a worker) and registers its stop. */
  run<T extends { start(): void; stop(): Promise<void> }>(step: string, part: T): T;
  /**
   * Runs the rest of a start: if it fails half-way, what had started is closed (in order) before
   * the error goes on, so a failed start leaves no port, pool or loop behind.
   */
  starting<T>(start: () => Promise<T>): Promise<T>;
  /**
   * Closes every step, last started first, each logged. A step that fails is logged and the others
   * still close; `close` then rejects with the first failure. Calling it again returns the same promise.
   */
  close(): Promise<void>;
}

/** The lifecycle of the process part called `name` (a service, the gateway, `npm start` as a whole). */
export function createLifecycle(name: string, log: Logger): Lifecycle {
  const steps: Array<{ step: string; close: () => unknown }> = [];
  let closing: Promise<void> | undefined;

  async function closeAll(): Promise<void> {
    const failures: unknown[] = [];
    for (const { step, close } of steps.splice(0).reverse()) {
      // Logged before, so a step that hangs is the last line of the log.
      log.info({ step }, `closing ${step}`);
      try {
        await close();
      } catch (err) {
        failures.push(err);
        log.error({ step, err }, `closing ${step} failed; closing the rest`);
      }
    }
    log.info(`${name} stopped`);
    if (failures.length > 0) throw failures[0];
  }

  const lifecycle: Lifecycle = {
    log,
    onClose(step, close) {
      steps.push({ step, close });
    },
    run(step, part) {
      part.start();
      steps.push({ step, close: () => part.stop() });
      return part;
    },
    async starting(start) {
      try {
        return await start();
      } catch (err) {
        await lifecycle.close().catch(() => {});
        throw err;
      }
    },
    close() {
      closing ??= closeAll();
      return closing;
    },
  };
  return lifecycle;
}

/** What every process starts with: its logger, its tracing, and the lifecycle that closes them. */
export interface ProcessBase {
  log: Logger;
  /** Present when tracing is configured. */
  tracing: Tracing | undefined;
  lifecycle: Lifecycle;
}

/** Opens the logger and tracing of `name`; tracing is the lifecycle's first step, so it closes last and exports every span. */
export async function openProcess(name: string, config: { logLevel: string; tracing?: TracingConfig | undefined }): Promise<ProcessBase> {
  const log = createLogger(name, config.logLevel);
  const lifecycle = createLifecycle(name, log);
  const tracing = await startTracing(config.tracing, name);
  if (tracing) lifecycle.onClose("tracing", () => tracing.shutdown());
  return { log, tracing, lifecycle };
}
