import { constants, type PerformanceEntry, PerformanceObserver } from "node:perf_hooks";
import { getHeapSpaceStatistics, setFlagsFromString } from "node:v8";
import { envInt, envOptional } from "./config.js";

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

/** How a process's old generation grows, for its start line: a percent, or up to a percent within a budget. */
export interface HeapGrowth {
  percent: number;
  budgetMb?: number;
}

/**
 * Applies the memory settings a process reads from its environment. Run first by every entry point
 * (runMain), so `npm start`, the image, Kubernetes and the bench all get it from the one place.
 * V8 reads this flag at each full collection, so setting it after start works, unlike the young
 * generation's size (`--max-semi-space-size`), which only the node command line or NODE_OPTIONS can set.
 * `defaults` are the process's own: its growth when HEAP_GROWING_PERCENT is unset, and an old-generation
 * budget within which that growth applies (boundHeapGrowth; a HEAP_GROWING_PERCENT given fixes the
 * growth instead). A `--heap-growing-percent` given to node itself wins over both. Undefined: V8's
 * own rule, or node's flag.
 */
export function applyMemorySettings(
  env: Record<string, string | undefined> = process.env,
  execArgv: readonly string[] = process.execArgv,
  defaults: { percent?: number; budgetMb?: number } = {},
): HeapGrowth | undefined {
  const percent = readHeapGrowingPercent(env, defaults.percent ?? DEFAULT_HEAP_GROWING_PERCENT);
  if (execArgv.some((arg) => /^--heap[-_]growing[-_]percent\b/.test(arg))) return undefined;
  if (percent === 0) return undefined;
  setFlagsFromString(`--heap-growing-percent=${percent}`);
  if (envOptional(env, "HEAP_GROWING_PERCENT") !== undefined || defaults.budgetMb === undefined) return { percent };
  boundHeapGrowth(percent, defaults.budgetMb);
  return { percent, budgetMb: defaults.budgetMb };
}

/**
 * The old generation's budget of `npm start`'s one process, in MB: what survived the last full
 * collection plus the growth allowed before the next one. At 100% growth the one process's transfers
 * (20-24 MB surviving) stay within it; 100-item batch calls at concurrency 16 (30-37 MB surviving,
 * after a long run) grew it to 60-70 MB and the process past 150 MB, so there the growth shrinks to
 * what fits (bench/README.md, "The one process's old generation: a budget").
 */
export const ONE_PROCESS_OLD_GENERATION_BUDGET_MB = 48;

/** The growth, in percent, that keeps `live` bytes plus the growth within `budget` bytes, between `min` and `max`. */
export function growthWithinBudget(budget: number, live: number, min: number, max: number): number {
  if (live <= 0) return max;
  return Math.max(min, Math.min(max, Math.floor(((budget - live) / live) * 100)));
}

/**
 * Bytes in V8's old generation (every space but the young generation's). Read by the observer just
 * after a full collection: what survived it, and what the few milliseconds since have promoted.
 */
export function oldGenerationUsed(): number {
  let used = 0;
  for (const space of getHeapSpaceStatistics()) {
    if (space.space_name !== "new_space" && space.space_name !== "new_large_object_space") used += space.space_used_size;
  }
  return used;
}

function isFullCollection(entry: PerformanceEntry): boolean {
  return (entry as PerformanceEntry & { detail?: { kind?: number } }).detail?.kind === constants.NODE_PERFORMANCE_GC_MAJOR;
}

/**
 * Grows the old generation by `maxPercent` between full collections while that stays within
 * `budgetMb`, and by less as what survives grows, down to `minPercent`: fewer full collections (each
 * a pause of the one event loop) while the heap is small, and a bounded heap when it is not. After
 * each full collection it sets V8's `--heap-growing-percent` for the next, which V8 reads when it
 * computes the next collection's limit. It never caps the heap: live data above the budget still
 * gets memory, collected at `minPercent`.
 */
export function boundHeapGrowth(
  maxPercent: number,
  budgetMb: number,
  minPercent: number = DEFAULT_HEAP_GROWING_PERCENT,
): { percent(): number; close(): void } {
  const budget = budgetMb * 1024 * 1024;
  let current = maxPercent;
  const observer = new PerformanceObserver((list) => {
    if (!list.getEntries().some(isFullCollection)) return;
    const next = growthWithinBudget(budget, oldGenerationUsed(), minPercent, maxPercent);
    if (next === current) return;
    current = next;
    setFlagsFromString(`--heap-growing-percent=${next}`);
  });
  observer.observe({ type: "gc" });
  return { percent: () => current, close: () => observer.disconnect() };
}
