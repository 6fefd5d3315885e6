// The REST load: wrk (Debian's package; scripts/ensure-bench-tools.sh installs it) running
// rest-load.lua, which makes every request's body with entities drawn at random.
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";

const SCRIPT = fileURLToPath(new URL("./rest-load.lua", import.meta.url));

/** wrk gives up on a request unanswered this long and counts it under `timeout`. */
const TIMEOUT_S = 30;

export interface WrkOptions {
  /** The REST base, ending in /v1. */
  restUrl: string;
  apiKey: string;
  /** A workload rest-load.lua knows: transfer, deposit, hot, hold, multileg, batch, batch-hot, search. */
  workload: string;
  /** Connections, each with one request in flight. */
  concurrency: number;
  /** wrk takes whole seconds: rounded, at least 1. */
  seconds: number;
  /** A file of entity ids, one a line, that the bodies draw from. */
  entitiesFile: string;
  hot: string;
  /** For `search`: how many values of the metadata key `k` were seeded (v0 to v<n-1>). */
  searchValues?: number;
}

export interface WrkResult {
  /** Requests answered with success (a batch with no refused item). */
  ok: number;
  /** Transfers (100 a batch call), or hold pairs (captures), answered with success. */
  units: number;
  /** Every request answered, successes and failures. */
  requests: number;
  seconds: number;
  /** wrk's latency percentiles of every answered request, ms. */
  p50: number;
  p95: number;
  p99: number;
  max: number;
  /** CPU seconds the wrk process used. */
  cpuSeconds: number;
  /** Failures by code: the answer's error code, http_<status>, or wrk's connect/read/write/timeout. */
  errors: Record<string, number>;
}

/** The wrk command line of one run. */
export function wrkArgs(options: WrkOptions): string[] {
  return [
    "--threads",
    "1",
    "--connections",
    String(options.concurrency),
    "--duration",
    `${Math.max(1, Math.round(options.seconds))}s`,
    "--timeout",
    `${TIMEOUT_S}s`,
    "--header",
    `Authorization: ${options.apiKey}`,
    "--script",
    SCRIPT,
    options.restUrl,
    "--",
    options.workload,
    options.entitiesFile,
    options.hot,
    ...(options.searchValues ? [String(options.searchValues)] : []),
  ];
}

/** Reads the line rest-load.lua's `done` prints. */
export function parseWrkOutput(stdout: string): WrkResult {
  const line = stdout.split("\n").find((l) => l.startsWith("BENCH_WRK "));
  if (!line) throw new Error(`wrk printed no BENCH_WRK line:\n${stdout}`);
  const raw = JSON.parse(line.slice("BENCH_WRK ".length)) as {
    ok: number;
    units: number;
    requests: number;
    durationUs: number;
    p50Us: number;
    p95Us: number;
    p99Us: number;
    maxUs: number;
    cpuSeconds: number;
    errors: Record<string, number>;
  };
  return {
    ok: raw.ok,
    units: raw.units,
    requests: raw.requests,
    seconds: raw.durationUs / 1e6,
    p50: raw.p50Us / 1000,
    p95: raw.p95Us / 1000,
    p99: raw.p99Us / 1000,
    max: raw.maxUs / 1000,
    cpuSeconds: raw.cpuSeconds,
    errors: raw.errors,
  };
}

/** One wrk run; rejects when wrk cannot start or exits with an error. */
export function runWrk(options: WrkOptions): Promise<WrkResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.env["WRK"] ?? "wrk", wrkArgs(options), { stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (c: Buffer) => (stdout += c.toString()));
    child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
    child.on("error", (err) => reject(new Error(`wrk could not start (${err.message}): run bash scripts/ensure-bench-tools.sh`)));
    // "close", not "exit": output may still be arriving when the process has exited.
    child.on("close", (code) => {
      if (code !== 0) return reject(new Error(`wrk exited ${code}:\n${stdout}${stderr}`));
      try {
        resolve(parseWrkOutput(stdout));
      } catch (err) {
        reject(err instanceof Error ? new Error(`${err.message}${stderr}`) : err);
      }
    });
  });
}
