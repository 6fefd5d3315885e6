// The results, as one JSON document and the same thing as Markdown tables.
import { cpus, release, totalmem } from "node:os";
import type { PgbenchResult } from "./pgbench.js";
import type { CpuSource, ServiceName } from "./system.js";
import type { DrainResult, WebhookLatency } from "./webhooks.js";
import type { Transport, WorkloadName } from "./workloads.js";

export interface Cell {
  workload: WorkloadName;
  transport: Transport;
  concurrency: number;
  ok: number;
  perSecond: number;
  /** perSecond / pgbench TPS. */
  ratio: number;
  p50: number;
  p95: number;
  p99: number;
  max: number;
  errors: Record<string, number>;
  /** Peak RSS of each process during this cell (MB). */
  rssMb: Record<ServiceName, number>;
  /** Share of one core each process used during the measured window (%). */
  cpu: Record<CpuSource, number>;
  /** Outbox and consumer backlog left when the cell ended (events). */
  backlogAfter: number;
}

export interface Machine {
  cpu: string;
  cores: number;
  memoryGb: number;
  kernel: string;
  node: string;
  postgres: string;
  nats: string;
}

export interface Report {
  date: string;
  smoke: boolean;
  machine: Machine;
  settings: { warmupS: number; durationS: number; concurrency: number[]; entities: number; perCellPeakRss: boolean };
  pgbench?: PgbenchResult;
  cells: Cell[];
  webhooks: WebhookLatency[];
  drain?: DrainResult;
  /** Peak RSS of each process over the whole run (MB). */
  peakRssMb: Record<ServiceName, number>;
  invariants: { ok: boolean; violations: string[] };
  unexpectedErrors: string[];
  ok: boolean;
}

export function machineInfo(postgresVersion: string, natsVersion: string): Machine {
  return {
    cpu: cpus()[0]?.model ?? "unknown",
    cores: cpus().length,
    memoryGb: Math.round(totalmem() / 1024 ** 3),
    kernel: release(),
    node: process.version,
    postgres: postgresVersion,
    nats: natsVersion,
  };
}

const f0 = (n: number) => Math.round(n).toString();
const f1 = (n: number) => n.toFixed(1);
const f2 = (n: number) => n.toFixed(2);

/** `code: n` pairs, or 0. */
function errorsText(errors: Record<string, number>): string {
  const entries = Object.entries(errors);
  return entries.length === 0 ? "0" : entries.map(([code, n]) => `${code}: ${n}`).join(", ");
}

/** The header row and one row per cell: the table the terminal and latest.md show. */
export function cellsTable(cells: Cell[]): string {
  const lines = [
    "| workload | via | conc | ok | tx/s | x pgbench | p50 ms | p95 ms | p99 ms | errors | RSS MB ledger/hold/notif/gw | CPU % ledger/hold/notif/gw/pg/nats/bench | backlog after |",
    "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|---|---:|",
  ];
  for (const c of cells) {
    lines.push(
      `| ${c.workload} | ${c.transport} | ${c.concurrency} | ${c.ok} | ${f0(c.perSecond)} | ${f2(c.ratio)} | ${f1(c.p50)} | ${f1(c.p95)} | ${f1(c.p99)} | ${errorsText(c.errors)} | ` +
        `${f0(c.rssMb.ledger)}/${f0(c.rssMb.hold)}/${f0(c.rssMb.notification)}/${f0(c.rssMb.gateway)} | ` +
        `${c.cpu.ledger}/${c.cpu.hold}/${c.cpu.notification}/${c.cpu.gateway}/${c.cpu.postgres}/${c.cpu.nats}/${c.cpu.bench} | ${c.backlogAfter} |`,
    );
  }
  return lines.join("\n");
}

export function toMarkdown(report: Report): string {
  const m = report.machine;
  const out: string[] = [];
  out.push(`# Benchmark results${report.smoke ? " (smoke: durations too short to mean anything)" : ""}`, "");
  out.push(`${report.date} · ${m.cpu}, ${m.cores} cores, ${m.memoryGb} GB · Linux ${m.kernel} · Node ${m.node} · ${m.postgres} · NATS ${m.nats}`, "");
  out.push(
    `Warm-up ${report.settings.warmupS} s, measured ${report.settings.durationS} s per cell, concurrency ${report.settings.concurrency.join(", ")}, ` +
      `${report.settings.entities} pre-funded entities. RSS is the peak during each cell${report.settings.perCellPeakRss ? "" : " (cumulative since start: this kernel refused to reset it)"}.`,
    "",
  );
  if (report.pgbench) {
    const p = report.pgbench;
    out.push(`**pgbench reference** (TPC-B-like, scale ${p.scale}, ${p.clients} clients, -j 2, ${p.seconds} s, prepared): **${f0(p.tps)} TPS**, latency average ${f2(p.latencyMs)} ms.`, "");
  }
  if (report.cells.length) out.push(cellsTable(report.cells), "");
  if (report.webhooks.length) {
    out.push("**Webhooks** (one HTTPS receiver; commit = the transaction's RPC response, receipt = the receiver got its `transaction.created`):", "");
    out.push("| rate asked | sent | achieved/s | p50 ms | p99 ms | max ms | missing | errors |", "|---:|---:|---:|---:|---:|---:|---:|---|");
    for (const w of report.webhooks) {
      out.push(`| ${w.rate}/s | ${w.sent} | ${f0(w.achievedPerSecond)} | ${f0(w.p50)} | ${f0(w.p99)} | ${f0(w.max)} | ${w.missing} | ${errorsText(w.errors)} |`);
    }
    out.push("");
  }
  if (report.drain) {
    const d = report.drain;
    out.push(`**Drain**: one notification process delivered a backlog of ${d.events} events in ${f2(d.seconds)} s: **${f0(d.perSecond)} deliveries/s**${d.missing ? `, ${d.missing} missing` : ""}.`, "");
  }
  const peak = report.peakRssMb;
  out.push(`**Peak RSS over the run** (MB): ledger ${f0(peak.ledger)}, hold ${f0(peak.hold)}, notification ${f0(peak.notification)}, gateway ${f0(peak.gateway)}.`, "");
  out.push(
    report.invariants.ok
      ? "**Invariants**: hold (posted sums zero per program and currency, no negative available, stored balances match legs, `held` matches active holds, every event delivered exactly once)."
      : `**Invariants BROKEN**:\n${report.invariants.violations.map((v) => `- ${v}`).join("\n")}`,
  );
  if (report.unexpectedErrors.length) out.push("", `**Unexpected errors**:\n${report.unexpectedErrors.map((v) => `- ${v}`).join("\n")}`);
  out.push("", report.ok ? "Run: **passed**." : "Run: **FAILED**.");
  return out.join("\n") + "\n";
}

/** JSON.stringify that never meets a bigint (money is bigint inside, numbers in the report). */
export function toJson(report: Report): string {
  return JSON.stringify(report, (_key, value: unknown) => (typeof value === "bigint" ? value.toString() : value), 2) + "\n";
}
