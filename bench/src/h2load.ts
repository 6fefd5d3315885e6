// The RPC load from a client that is not JavaScript: h2load (Debian's nghttp2-client;
// scripts/ensure-bench-tools.sh installs it). A Connect unary call over HTTP/2 is a POST of the binary
// request message with `content-type: application/proto`, which h2load sends from a file. Connect's
// own client spends about as much CPU per call as the ledger spends serving it, so on a small machine
// the `rpc` cells measure the client as much as the server; these cells measure the server.
//
// h2load posts one body file for all its requests, so the load runs as up to MAX_PROCESSES h2load
// processes, each with a body of its own: its own pair of entities (transfer), its own entity
// (deposit), or, in every other process, a debit of the hot entity (hot). Each process is one client
// with one HTTP/2 connection, its share of the calls in flight multiplexed on it, as Connect's
// client and our services' callers keep one connection per service (one call per connection, the
// shape of HTTP/1.1 and wrk, is not how an RPC client talks). The history reads run at concurrency 1 as a
// row of one-second h2load runs, each with a random moment or window of its own (a window holds
// twice a page, so every page is full). Batches do not run this way: a batch answers 200 with refused
// items inside, which h2load cannot see.
import { spawn } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { create, toBinary } from "@bufbuild/protobuf";
import {
  CreateTransactionRequestSchema,
  FundEntityRequestSchema,
  GetEntityRequestSchema,
  GetEntityStatementRequestSchema,
  LedgerService,
  TransactionStatus,
} from "@ledger/proto/ledger/v1/ledger_pb.js";
import type { LoopResult } from "./closed-loop.js";
import { historyRequests, isHistoryWorkload, STATEMENT_PAGE, type HistoryFixture, type HistoryWorkloadName } from "./history-workloads.js";
import type { Fixtures, WorkloadName } from "./workloads.js";

export const H2LOAD_WORKLOADS: readonly string[] = ["transfer", "deposit", "hot", "as-of", "statement"];

/** More processes than this only add scheduling noise on a small machine. */
const MAX_PROCESSES = 16;

export interface H2loadOptions {
  /** The ledger service's RPC base URL (http://host:port: HTTP/2 with prior knowledge). */
  ledgerUrl: string;
  apiKey: string;
  workload: WorkloadName | HistoryWorkloadName;
  concurrency: number;
  seconds: number;
  fixtures: Fixtures;
  /** The history reads' entity; needed by `as-of` and `statement`. */
  history?: HistoryFixture;
  /** Where the body and log files go. */
  dir: string;
}

export interface H2loadResult extends LoopResult {
  /** CPU seconds the h2load processes used. */
  cpuSeconds: number;
}

/** The URL path of one of the ledger's methods, as Connect serves it. */
function methodPath(name: string): string {
  return `/${LedgerService.typeName}/${name}`;
}

/** The method a workload calls and each process's request body. */
function requests(workload: WorkloadName, fixtures: Fixtures, processes: number): { path: string; bodies: Uint8Array[] } {
  const { entities, hot } = fixtures;
  if (entities.length < 2 * processes) throw new Error(`h2load needs ${2 * processes} entities, the run has ${entities.length}`);
  const transfer = (from: string, to: string) =>
    toBinary(
      CreateTransactionRequestSchema,
      create(CreateTransactionRequestSchema, {
        description: "bench",
        status: TransactionStatus.POSTED,
        form: { case: "transfer", value: { fromEntityId: from, toEntityId: to, amount: 1n } },
      }),
    );
  const at = (i: number) => entities[i] as string;
  const each = <T>(f: (i: number) => T) => Array.from({ length: processes }, (_, i) => f(i));
  switch (workload) {
    case "transfer":
      return { path: methodPath(LedgerService.method.createTransaction.name), bodies: each((i) => transfer(at(2 * i), at(2 * i + 1))) };
    case "hot":
      return {
        path: methodPath(LedgerService.method.createTransaction.name),
        bodies: each((i) => transfer(i % 2 === 0 ? hot : at(2 * i), at(2 * i + 1))),
      };
    case "deposit":
      return {
        path: methodPath(LedgerService.method.fundEntity.name),
        bodies: each((i) =>
          toBinary(FundEntityRequestSchema, create(FundEntityRequestSchema, { entityId: at(i), amount: 1n, description: "bench" })),
        ),
      };
    default:
      throw new Error(`h2load does not run the ${workload} workload`);
  }
}

/** The method of a history read and a request body with a fresh random moment or window. */
export function historyRequest(workload: HistoryWorkloadName, history: HistoryFixture): { path: string; body: Uint8Array } {
  const draw = historyRequests(history);
  if (workload === "as-of") {
    const request = create(GetEntityRequestSchema, { entityId: history.entityId, asOf: draw.asOf() });
    return { path: methodPath(LedgerService.method.getEntity.name), body: toBinary(GetEntityRequestSchema, request) };
  }
  const request = create(GetEntityStatementRequestSchema, { entityId: history.entityId, limit: STATEMENT_PAGE, ...draw.window() });
  return { path: methodPath(LedgerService.method.getEntityStatement.name), body: toBinary(GetEntityStatementRequestSchema, request) };
}

/** Calls in flight on each process's connection: `concurrency` spread over at most MAX_PROCESSES processes. */
export function callsPerProcess(concurrency: number): number[] {
  const processes = Math.min(concurrency, MAX_PROCESSES);
  return Array.from({ length: processes }, (_, i) => Math.floor(concurrency / processes) + (i < concurrency % processes ? 1 : 0));
}

/** What one h2load process printed, and the CPU its shell's `times` reported for it. */
interface ProcessRun {
  succeeded: number;
  failed: number;
  errored: number;
  timeout: number;
  seconds: number;
  cpuSeconds: number;
}

/** Reads h2load's summary and the children's line of bash's `times` (`0m1.230s 0m0.450s`). */
export function parseH2loadOutput(stdout: string): ProcessRun {
  const requests = /requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded, (\d+) failed, (\d+) errored, (\d+) timeout/.exec(stdout);
  const finished = /finished in ([\d.]+)(m?s),/.exec(stdout);
  const times = [...stdout.matchAll(/^(\d+)m([\d.]+)s (\d+)m([\d.]+)s$/gm)].at(-1);
  if (!requests || !finished || !times) throw new Error(`cannot read h2load's output:\n${stdout}`);
  const minutes = (m: string | undefined, s: string | undefined) => Number(m) * 60 + Number(s);
  return {
    succeeded: Number(requests[1]),
    failed: Number(requests[2]),
    errored: Number(requests[3]),
    timeout: Number(requests[4]),
    seconds: Number(finished[1]) / (finished[2] === "ms" ? 1000 : 1),
    cpuSeconds: minutes(times[1], times[2]) + minutes(times[3], times[4]),
  };
}

function runProcess(args: string[]): Promise<ProcessRun> {
  return new Promise((resolve, reject) => {
    // bash's `times` prints the CPU its child used, which h2load does not report itself.
    const child = spawn("bash", ["-c", 'h2load "$@"; code=$?; times; exit $code', "h2load", ...args], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    child.stdout.on("data", (c: Buffer) => (out += c.toString()));
    child.stderr.on("data", (c: Buffer) => (out += c.toString()));
    child.on("error", reject);
    // "close", not "exit": output may still be arriving when the process has exited.
    child.on("close", (code) => {
      if (code !== 0) return reject(new Error(`h2load exited ${code} (run bash scripts/ensure-bench-tools.sh):\n${out}`));
      try {
        resolve(parseH2loadOutput(out));
      } catch (err) {
        reject(err);
      }
    });
  });
}

/** Nearest-rank percentile of sorted values. */
function percentile(sorted: number[], p: number): number {
  if (!sorted.length) return 0;
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] ?? 0;
}

/**
 * One timed run of every process at once; answers the window's throughput, the latency percentiles
 * of its successful calls (from h2load's per-request logs) and failures by status.
 */
export async function runH2load(options: H2loadOptions): Promise<H2loadResult> {
  const seconds = Math.max(1, Math.round(options.seconds));
  /** One h2load process: one connection with `calls` in flight, posting `body` to `path` for `duration` seconds. */
  const start = (i: number, calls: number, path: string, bodyBytes: Uint8Array, duration: number) => {
    const body = join(options.dir, `h2load-${i}.bin`);
    const log = join(options.dir, `h2load-${i}.log`);
    writeFileSync(body, bodyBytes);
    writeFileSync(log, "");
    const args = [
      ...["--clients", "1", "--threads", "1", "--max-concurrent-streams", String(calls)],
      ...["--duration", String(duration), "--data", body, "--log-file", log],
      ...["--header", "content-type: application/proto", "--header", "connect-protocol-version: 1"],
      ...["--header", `authorization: ${options.apiKey}`, new URL(path, options.ledgerUrl).toString()],
    ];
    return runProcess(args).then((run) => ({ run, log }));
  };
  let runs: Array<{ run: ProcessRun; log: string }>;
  if (isHistoryWorkload(options.workload)) {
    if (!options.history) throw new Error(`h2load's ${options.workload} cells need the history entity`);
    if (options.concurrency !== 1) throw new Error(`h2load runs ${options.workload} at concurrency 1 only`);
    runs = [];
    for (let i = 0; i < seconds; i++) {
      const { path, body } = historyRequest(options.workload, options.history);
      runs.push(await start(i, 1, path, body, 1));
    }
  } else {
    const calls = callsPerProcess(options.concurrency);
    const { path, bodies } = requests(options.workload, options.fixtures, calls.length);
    runs = await Promise.all(calls.map((n, i) => start(i, n, path, bodies[i] as Uint8Array, seconds)));
  }
  const latencies: number[] = [];
  const errors: Record<string, number> = {};
  for (const { log } of runs) {
    for (const line of readFileSync(log, "utf8").split("\n")) {
      const [, status, micros] = line.split("\t");
      if (status === undefined || micros === undefined) continue;
      if (status.startsWith("2")) {
        latencies.push(Number(micros) / 1000);
      } else {
        const code = status === "-1" ? "stream_failed" : `http_${status}`;
        errors[code] = (errors[code] ?? 0) + 1;
      }
    }
  }
  for (const { run } of runs) {
    if (run.timeout) errors["timeout"] = (errors["timeout"] ?? 0) + run.timeout;
    if (run.errored) errors["errored"] = (errors["errored"] ?? 0) + run.errored;
  }
  latencies.sort((a, b) => a - b);
  const succeeded = runs.reduce((sum, { run }) => sum + run.succeeded, 0);
  // Side by side, the processes share the window; in a row, their windows add up.
  const elapsed = isHistoryWorkload(options.workload)
    ? runs.reduce((sum, { run }) => sum + run.seconds, 0)
    : Math.max(...runs.map(({ run }) => run.seconds));
  return {
    ok: succeeded,
    perSecond: succeeded / elapsed,
    p50: percentile(latencies, 50),
    p95: percentile(latencies, 95),
    p99: percentile(latencies, 99),
    max: latencies.at(-1) ?? 0,
    errors,
    cpuSeconds: runs.reduce((sum, { run }) => sum + run.cpuSeconds, 0),
  };
}
