import { setFlagsFromString } from "node:v8";
import { envInt } from "./config.js";

/**
 * How far V8 lets the old generation grow past what survived its last full collection, in percent
 * (docs/operations.md#memory). V8's own rule grows it up to 4x when collections are cheap, which
 * they are here: under load the ledger's heap reached 55-80 MB around 20 MB of live objects before
 * a full collection, most of each process's peak RSS. 25% keeps the heap near its live size, for
 * a full collection about every second (about 10 ms each) and the same time in garbage collection
 * per request overall; throughput measured the same (bench/README.md, "Memory").
 */
export const DEFAULT_HEAP_GROWING_PERCENT = 25;

/**
 * The default of `npm start`'s one process, which runs every service: its full collections came
 * about every 0.6 s at 25%, each pausing the one event loop all the services share, and they set the
 * p99 of transfers at concurrency 16. At 100 they come about every 1.3 s; `npm start` also gives
 * it a quarter of V8's default young generation (NODE_OPTIONS in package.json), which pays for the
 * larger old one (bench/README.md, "npm start's heap: fewer full collections, a smaller young
 * generation" and "npm start's young generation after a long run: 4 MB").
 */
export const ONE_PROCESS_HEAP_GROWING_PERCENT = 100;

/** HEAP_GROWING_PERCENT: 0 leaves V8's own rule, 1 to 1000 sets the growth; unset, `fallback`. */
export function readHeapGrowingPercent(
  env: Record<string, string | undefined> = process.env,
  fallback: number = DEFAULT_HEAP_GROWING_PERCENT,
): number {
  return envInt(env, "HEAP_GROWING_PERCENT", fallback, 0, 1000);
}

/**
 * Applies the memory settings a process reads from its environment. Run first by every entry point
 * (runMain), so `npm start`, the image, Kubernetes and the bench all get it from the one place.
 * V8 reads this flag at each full collection, so setting it after start works, unlike the young
 * generation's size (`--max-semi-space-size`), which only the node command line or NODE_OPTIONS can set.
 * A `--heap-growing-percent` given to node itself wins.
 */
export function applyMemorySettings(
  env: Record<string, string | undefined> = process.env,
  execArgv: readonly string[] = process.execArgv,
  fallback: number = DEFAULT_HEAP_GROWING_PERCENT,
): number | undefined {
  const percent = readHeapGrowingPercent(env, fallback);
  if (execArgv.some((arg) => /^--heap[-_]growing[-_]percent\b/.test(arg))) return undefined;
  if (percent > 0) setFlagsFromString(`--heap-growing-percent=${percent}`);
  return percent > 0 ? percent : undefined;
}
