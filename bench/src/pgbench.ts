// The reference: Postgres's own TPC-B-like bank workload on the same server, in the same run, so
// every ledger figure is a ratio to what this machine's Postgres does with no service in front.
import { spawn } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type postgres from "postgres";
import { percentile } from "./closed-loop.js";

export interface PgbenchResult {
  tps: number;
  latencyMs: number;
  scale: number;
  clients: number;
  seconds: number;
  /** The latency reference for the p99 target: this Postgres's own tail at that concurrency. */
  tail?: PgbenchTail;
}

/**
 * pgbench's simple-update script (`-N`: an account's update, its read, a history insert, commit;
 * no branch or teller row that every client updates) at the concurrency of the p99 target, every
 * transaction's latency logged: how long this machine's Postgres itself takes at its tail for a
 * small write transaction with no hot row, as a ledger transfer between two of many entities is.
 */
export interface PgbenchTail {
  clients: number;
  tps: number;
  transactions: number;
  p50Ms: number;
  p99Ms: number;
}

/** The concurrency of the p99 target (`runtimeTargets` in report.ts). */
export const TAIL_CLIENTS = 16;

const PGBENCH = process.env["PGBENCH"] ?? "pgbench";

/** Runs pgbench; answers its output (stdout and stderr), or rejects with it when it exits non-zero. */
function run(args: string[], env?: NodeJS.ProcessEnv): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(PGBENCH, args, { stdio: ["ignore", "pipe", "pipe"], ...(env ? { env } : {}) });
    let out = "";
    child.stdout.on("data", (c: Buffer) => (out += c.toString()));
    child.stderr.on("data", (c: Buffer) => (out += c.toString()));
    child.on("error", reject);
    child.on("close", (code) => (code === 0 ? resolve(out) : reject(new Error(`pgbench ${args.join(" ")} exited ${code}:\n${out}`))));
  });
}

/**
 * `pgbench -i -s <scale>` into a fresh database, then `-c 32 -j 2 -T <seconds> -M prepared`, then
 * (with `tail`) the latency reference; drops the database after.
 * The scratch database is named after the bench's own (`<benchDatabase>_pgbench`), so two benches on one
 * server with different BENCH_DATABASE_URLs do not drop each other's.
 */
export async function runPgbench(
  admin: postgres.Sql,
  baseUrl: string,
  benchDatabase: string,
  scale: number,
  seconds: number,
  options: { tail: boolean } = { tail: true },
): Promise<PgbenchResult> {
  const url = new URL(baseUrl);
  const database = `${benchDatabase}_pgbench`;
  await admin.unsafe(`drop database if exists ${database} with (force)`);
  await admin.unsafe(`create database ${database}`);
  const conn = connectionArgs(url);
  const clients = 32;
  try {
    await run(["-i", "-q", "-s", String(scale), ...conn, database]);
    const out = await run(["-c", String(clients), "-j", "2", "-T", String(seconds), "-M", "prepared", ...conn, database]);
    const tps = tpsOf(out);
    const latency = /latency average = ([\d.]+) ms/.exec(out);
    const result: PgbenchResult = { tps, latencyMs: latency ? Number(latency[1]) : 0, scale, clients, seconds };
    if (options.tail) result.tail = await runTail(conn, database, seconds);
    return result;
  } finally {
    await admin.unsafe(`drop database if exists ${database} with (force)`).catch(() => {});
  }
}

/** The TPS pgbench printed, without initial connection time. */
function tpsOf(out: string): number {
  const tps = /tps = ([\d.]+) \(without initial connection time\)/.exec(out);
  if (!tps) throw new Error(`could not read TPS from pgbench's output:\n${out}`);
  return Number(tps[1]);
}

/** pgbench's options to reach the server of `url` as its user (the database is named apart). */
export function connectionArgs(url: URL): string[] {
  return ["-h", url.hostname, "-p", url.port || "5432", "-U", decodeURIComponent(url.username) || "root"];
}

/** `pgbench -N -c 16 -l`: the per-transaction log read into percentiles. */
async function runTail(conn: string[], database: string, seconds: number): Promise<PgbenchTail> {
  const args = ["-N", "-c", String(TAIL_CLIENTS), "-j", "2", "-T", String(seconds), "-M", "prepared", ...conn];
  const { out, latenciesMs } = await runLogged(args, database);
  return {
    clients: TAIL_CLIENTS,
    tps: tpsOf(out),
    transactions: latenciesMs.length,
    p50Ms: percentile(latenciesMs, 0.5),
    p99Ms: percentile(latenciesMs, 0.99),
  };
}

/**
 * `pgbench <options> -l <database>`: its output, and every transaction's latency (ms, sorted) from
 * its per-transaction log (one file per thread, in a directory of its own, removed after).
 */
export async function runLogged(
  options: string[],
  database: string,
  env?: NodeJS.ProcessEnv,
): Promise<{ out: string; latenciesMs: number[] }> {
  const dir = mkdtempSync(join(tmpdir(), "ledger-pgbench-"));
  try {
    const out = await run([...options, "-l", "--log-prefix", join(dir, "log"), database], env);
    const latenciesMs = readdirSync(dir).flatMap((file) => transactionLatenciesMs(readFileSync(join(dir, file), "utf8")));
    latenciesMs.sort((a, b) => a - b);
    return { out, latenciesMs };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * Latencies (ms) from pgbench's per-transaction log: `client_id transaction_no time script_no
 * time_epoch time_us`, `time` in microseconds; a skipped or failed transaction has a word there.
 */
export function transactionLatenciesMs(log: string): number[] {
  const out: number[] = [];
  for (const line of log.split("\n")) {
    const time = Number(line.split(" ")[2]);
    if (line && Number.isFinite(time)) out.push(time / 1000);
  }
  return out;
}
