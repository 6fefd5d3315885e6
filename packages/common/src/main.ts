import { ConfigError } from "./config.js";
import { applyMemorySettings, type HeapGrowth } from "./memory.js";

/**
 * Runs a process's start function and stops it cleanly on SIGTERM or SIGINT (docs/operations.md#shutdown):
 * stop accepting, drain, close, exit 0. A configuration error ends the start with its message alone.
 * The heap's settings (docs/operations.md#memory) are applied first, before the services allocate;
 * `heap` is the process's own default growth and old-generation budget (applyMemorySettings); `start`
 * is told what was set (undefined: V8's own rule, or node's own flag).
 */
export function runMain(
  name: string,
  start: (memory: { heapGrowth: HeapGrowth | undefined }) => Promise<{ close(): Promise<void> }>,
  options: { heap?: { percent?: number; budgetMb?: number } } = {},
): void {
  Promise.resolve()
    .then(() => {
      const heapGrowth = applyMemorySettings(process.env, process.execArgv, options.heap);
      return start({ heapGrowth });
    })
    .then(
      (handle) => {
        let stopping = false;
        const stop = (signal: string) => {
          if (stopping) return;
          stopping = true;
          console.error(JSON.stringify({ level: 30, service: name, msg: `received ${signal}; draining` }));
          const force = setTimeout(() => process.exit(1), 30_000);
          force.unref();
          handle.close().then(
            () => process.exit(0),
            (err: unknown) => {
              console.error(`${name}: shutdown failed: ${String(err)}`);
              process.exit(1);
            },
          );
        };
        process.on("SIGTERM", () => stop("SIGTERM"));
        process.on("SIGINT", () => stop("SIGINT"));
      },
      (err: unknown) => {
        if (err instanceof ConfigError) console.error(`${name}: ${err.message}`);
        else console.error(`${name}: failed to start:`, err);
        process.exit(1);
      },
    );
}
