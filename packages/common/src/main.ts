import { ConfigError } from "./config.js";

/**
 * Runs a process's start function and stops it cleanly on SIGTERM or SIGINT (docs/operations.md#shutdown):
 * stop accepting, drain, close, exit 0. A configuration error ends the start with its message alone.
 */
export function runMain(name: string, start: () => Promise<{ close(): Promise<void> }>): void {
  Promise.resolve()
    .then(start)
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
