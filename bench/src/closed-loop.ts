// The RPC cells' closed loop: N workers calling through Connect's client, each sending its next
// request as soon as the last one answered, for a warm-up and then a measured window. Throughput
// and latency are over the window only.
import { errorCode } from "./connect.js";

/**
 * One call of a workload; `worker` lets a workload keep per-worker state. Answers the units it
 * completed for the tx/s column: transfers (1, or a batch's items), or hold pairs.
 */
export type Operation = (worker: number) => Promise<number>;

export interface LoopOptions {
  concurrency: number;
  warmupMs: number;
  durationMs: number;
  operation: Operation;
  /** Called about once a second with the elapsed time and the counts so far. */
  onProgress?: (elapsedMs: number, ok: number, failed: number) => void;
}

export interface LoopResult {
  /** Calls that succeeded within the measured window. */
  ok: number;
  /** Units (transfers, hold pairs) per second over the window. */
  perSecond: number;
  /** Latency percentiles of the window's successful requests, in ms. */
  p50: number;
  p95: number;
  p99: number;
  max: number;
  /** Failures by code over warm-up and window both: any failure is a finding. */
  errors: Record<string, number>;
}

/** Runs the load; stops by itself at the end of the window (each call has its own timeout). */
export async function runClosedLoop(options: LoopOptions): Promise<LoopResult> {
  const start = performance.now();
  const windowStart = start + options.warmupMs;
  const end = windowStart + options.durationMs;
  const latencies: number[] = [];
  const errors: Record<string, number> = {};
  let ok = 0;
  let units = 0;
  let failed = 0;
  const progress = options.onProgress ? setInterval(() => options.onProgress!(performance.now() - start, ok, failed), 1_000) : undefined;
  const worker = async (id: number) => {
    while (performance.now() < end) {
      const t0 = performance.now();
      try {
        const done = await options.operation(id);
        const t1 = performance.now();
        // Completions inside the window count, wherever they started: the window's throughput.
        if (t1 >= windowStart && t1 <= end) {
          ok++;
          units += done;
          latencies.push(t1 - t0);
        }
      } catch (err) {
        const code = errorCode(err);
        errors[code] = (errors[code] ?? 0) + 1;
        failed++;
      }
    }
  };
  try {
    await Promise.all(Array.from({ length: options.concurrency }, (_, i) => worker(i)));
  } finally {
    if (progress) clearInterval(progress);
  }
  latencies.sort((a, b) => a - b);
  return {
    ok,
    perSecond: units / (options.durationMs / 1000),
    p50: percentile(latencies, 0.5),
    p95: percentile(latencies, 0.95),
    p99: percentile(latencies, 0.99),
    max: latencies.at(-1) ?? 0,
    errors,
  };
}

/** Nearest-rank percentile of sorted values; 0 when there are none. */
export function percentile(sorted: number[], q: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)] ?? 0;
}
