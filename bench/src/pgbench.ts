// The reference: Postgres's own TPC-B-like bank workload on the same server, in the same run, so
// every ledger figure is a ratio to what this machine's Postgres does with no service in front.
import { spawn } from "node:child_process";
import type postgres from "postgres";

export interface PgbenchResult {
  tps: number;
  latencyMs: number;
  scale: number;
  clients: number;
  seconds: number;
}

const PGBENCH = process.env["PGBENCH"] ?? "pgbench";

function run(args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(PGBENCH, args, { stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    child.stdout.on("data", (c: Buffer) => (out += c.toString()));
    child.stderr.on("data", (c: Buffer) => (out += c.toString()));
    child.on("error", reject);
    child.on("exit", (code) => (code === 0 ? resolve(out) : reject(new Error(`pgbench ${args.join(" ")} exited ${code}:\n${out}`))));
  });
}

/** `pgbench -i -s <scale>` into a fresh database, then `-c 32 -j 2 -T <seconds> -M prepared`; drops it after. */
export async function runPgbench(admin: postgres.Sql, baseUrl: string, scale: number, seconds: number): Promise<PgbenchResult> {
  const database = "ledger_bench_pgbench";
  await admin.unsafe(`drop database if exists ${database} with (force)`);
  await admin.unsafe(`create database ${database}`);
  const url = new URL(baseUrl);
  const conn = ["-h", url.hostname, "-p", url.port || "5432", "-U", decodeURIComponent(url.username) || "root"];
  const clients = 32;
  try {
    await run(["-i", "-q", "-s", String(scale), ...conn, database]);
    const out = await run(["-c", String(clients), "-j", "2", "-T", String(seconds), "-M", "prepared", ...conn, database]);
    const tps = /tps = ([\d.]+) \(without initial connection time\)/.exec(out);
    const latency = /latency average = ([\d.]+) ms/.exec(out);
    if (!tps) throw new Error(`could not read TPS from pgbench's output:\n${out}`);
    return { tps: Number(tps[1]), latencyMs: latency ? Number(latency[1]) : 0, scale, clients, seconds };
  } finally {
    await admin.unsafe(`drop database if exists ${database} with (force)`).catch(() => {});
  }
}
