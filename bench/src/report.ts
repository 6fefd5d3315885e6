// The results, as one JSON document and the same thing as Markdown tables.
import { cpus, release, totalmem } from "node:os";
import { TAIL_CLIENTS, type PgbenchResult } from "./pgbench.js";
import type { CpuSource, Layout, ServiceName } from "./system.js";
import type { DrainResult, SlowBeside, WebhookLatency } from "./webhooks.js";
import type { AccountWorkloadName } from "./account-workloads.js";
import type { BatchWorkloadName } from "./batch-workloads.js";
import type { HistoryReference } from "./history-reference.js";
import { HISTORY_WORKLOADS, STATEMENT_PAGE, type HistoryWorkloadName } from "./history-workloads.js";
import { isSearchWorkload, SEARCH_P99_GOAL_MS, type SearchWorkloadName } from "./search-workload.js";
import type { Transport, WorkloadName } from "./workloads.js";

export interface Cell {
  /** Four processes, or the one of `npm start` (whose RSS and CPU then appear once, as "all"). */
  layout: Layout;
  workload: WorkloadName | BatchWorkloadName | HistoryWorkloadName | SearchWorkloadName | AccountWorkloadName;
  transport: Transport;
  concurrency: number;
  /** Calls that succeeded within the window. */
  ok: number;
  /** Transfers (items) per call: 1, or the batch size of a batch workload. */
  itemsPerCall: number;
  /** Transfers per second: calls per second times `itemsPerCall`. */
  perSecond: number;
  /** perSecond / the TPS of its layout's pgbench reference (`Report.pgbenchByLayout`). */
  ratio: number;
  /** WAL the server wrote over the measured window per transfer (or hold pair), every database and service included. */
  walBytesPerUnit?: number | undefined;
  p50: number;
  p95: number;
  p99: number;
  max: number;
  errors: Record<string, number>;
  /** Peak RSS of each process during this cell (MB); in one process, the same figure four times. */
  rssMb: Record<ServiceName, number>;
  /** Share of one core each process used during the measured window (%). */
  cpu: Record<CpuSource, number>;
  /** Outbox and consumer backlog left when the cell ended (events). */
  backlogAfter: number;
  /** Events the notification service stored per second over the cell (warm-up included). */
  eventsStoredPerSecond: number;
  /** How long after the cell ended its backlog took to empty (ms; the cap, 10 s, when it did not). */
  drainedMs: number;
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
  settings: { warmupS: number; durationS: number; concurrency: number[]; entities: number; perCellPeakRss: boolean; layouts: Layout[] };
  /** The opening pgbench run, alone on the machine, with the latency reference. */
  pgbench?: PgbenchResult;
  /**
   * The TPC-B run right before each layout after the first, which that layout's ratios divide by;
   * a layout not here (the first, or any in reports older than these runs) divides by `pgbench`.
   */
  pgbenchByLayout?: Partial<Record<Layout, PgbenchResult>>;
  /** A TPC-B run after the last layout: how far the machine drifted over the run. */
  pgbenchClosing?: PgbenchResult;
  /**
   * The history reads' reference in each layout: their SQL alone through pgbench at concurrency 1,
   * on that layout's database right after its history entity was seeded (history-reference.ts).
   */
  historyReference?: Partial<Record<Layout, Partial<Record<HistoryWorkloadName, HistoryReference>>>>;
  cells: Cell[];
  webhooks: WebhookLatency[];
  /**
   * Backlog drains (processes layout only): one notification process on the fresh database, then,
   * after the steady runs, one process and two processes on the same state.
   */
  drains: DrainResult[];
  /** The steady rate alone and beside a slow destination (processes layout only). */
  slowBeside?: SlowBeside;
  /** Peak RSS of each process over each layout's run (MB). */
  peakRssMb: Partial<Record<Layout, Record<ServiceName, number>>>;
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

/**
 * Each process's share of one core, in the tables' order: ledger/hold/notif/gw/pg/nats/bench (the
 * services once, as "all", in one process), then their sum over the machine's cores.
 */
function cpuText(cpu: Record<CpuSource, number>, layout: Layout | undefined): string {
  const services = layout === "one-process" ? `all ${cpu.ledger}` : `${cpu.ledger}/${cpu.hold}/${cpu.notification}/${cpu.gateway}`;
  return `${services}/${cpu.postgres}/${cpu.nats}/${cpu.bench}`;
}

/** Sum of every process's share (one process counted once), as "N% of C cores". */
function cpuTotal(cpu: Record<CpuSource, number>, layout: Layout | undefined, cores: number): string {
  const services = layout === "one-process" ? cpu.ledger : cpu.ledger + cpu.hold + cpu.notification + cpu.gateway;
  return `${services + cpu.postgres + cpu.nats + cpu.bench}% of ${cores * 100}%`;
}

/** The header row and one row per cell: the table the terminal and latest.md show. */
export function cellsTable(cells: Cell[]): string {
  const lines = [
    "| layout | workload | via | conc | ok calls | tx/s | x pgbench | p50 ms | p95 ms | p99 ms | errors | RSS MB ledger/hold/notif/gw | CPU % ledger/hold/notif/gw/pg/nats/bench | WAL B/tx | backlog after | events stored/s | drained in s |",
    "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|---|---:|---:|---:|---:|",
  ];
  for (const c of cells) {
    const one = c.layout === "one-process";
    const rss = one
      ? `all ${f0(c.rssMb.ledger)}`
      : `${f0(c.rssMb.ledger)}/${f0(c.rssMb.hold)}/${f0(c.rssMb.notification)}/${f0(c.rssMb.gateway)}`;
    const cpu = cpuText(c.cpu, c.layout);
    lines.push(
      `| ${c.layout} | ${c.itemsPerCall > 1 ? `${c.workload} (${c.itemsPerCall}/call)` : c.workload} | ${c.transport} | ${c.concurrency} | ${c.ok} | ${f0(c.perSecond)} | ${f2(c.ratio)} | ${f1(c.p50)} | ${f1(c.p95)} | ${f1(c.p99)} | ${errorsText(c.errors)} | ` +
        `${rss} | ${cpu} | ${c.walBytesPerUnit === undefined ? "" : f0(c.walBytesPerUnit)} | ${c.backlogAfter} | ${f0(c.eventsStoredPerSecond)} | ${f1(c.drainedMs / 1000)} |`,
    );
  }
  return lines.join("\n");
}

export function toMarkdown(report: Report): string {
  const out = [...headerLines(report), ...referenceLines(report)];
  if (report.cells.length) out.push(cellsTable(report.cells), "");
  out.push(...webhookLines(report));
  out.push(
    ...targetsTable(
      "**Webhook targets** (four processes, default settings; one HTTPS receiver on 127.0.0.1 answering 200 at once):",
      webhookTargets(report),
    ),
  );
  out.push(
    ...targetsTable(
      "**Runtime targets** (two-party posted transfers; `npm start`'s one process unless the target says apart):",
      runtimeTargets(report),
    ),
  );
  out.push(
    ...targetsTable(
      "**Search target** (`GET /transaction/groups?metadata[k]=v` among the search account's 1,000,000 groups, 100,000 in `--smoke`):",
      searchTargets(report.cells),
    ),
  );
  out.push(...outcomeLines(report));
  return out.join("\n") + "\n";
}

/** The report's title, the machine, and the run's settings. */
function headerLines(report: Report): string[] {
  const m = report.machine;
  const out: string[] = [];
  out.push(`# Benchmark results${report.smoke ? " (smoke: durations too short to mean anything)" : ""}`, "");
  out.push(
    `${report.date} · ${m.cpu}, ${m.cores} cores, ${m.memoryGb} GB · Linux ${m.kernel} · Node ${m.node} · ${m.postgres} · NATS ${m.nats}`,
    "",
  );
  out.push(
    `Warm-up ${report.settings.warmupS} s, measured ${report.settings.durationS} s per cell, concurrency ${report.settings.concurrency.join(", ")}, ` +
      `${report.settings.entities} pre-funded entities. RSS is the peak during each cell${report.settings.perCellPeakRss ? "" : " (cumulative since start: this kernel refused to reset it)"}.`,
    "",
  );
  return out;
}

/** pgbench's runs over the run, and the history reads' SQL alone. */
function referenceLines(report: Report): string[] {
  const out: string[] = [];
  if (report.pgbench) {
    const p = report.pgbench;
    out.push(
      `**pgbench reference** (TPC-B-like, scale ${p.scale}, ${p.clients} clients, -j 2, ${p.seconds} s, prepared): **${f0(p.tps)} TPS**, latency average ${f2(p.latencyMs)} ms.` +
        (p.tail
          ? ` Its tail at the p99 target's concurrency (simple-update script \`-N\`, no hot row, ${p.tail.clients} clients): ` +
            `${f0(p.tail.tps)} TPS, p50 ${f1(p.tail.p50Ms)} ms, **p99 ${f1(p.tail.p99Ms)} ms**.`
          : ""),
      "",
    );
    const later = Object.entries(report.pgbenchByLayout ?? {});
    if (later.length || report.pgbenchClosing) {
      const share = (r: PgbenchResult) => `${f0((100 * r.tps) / p.tps)}% of the opening`;
      out.push(
        "**The reference over the run** (each layout's `x pgbench` divides by the TPC-B run right before it, the opening one for the first): " +
          [
            ...later.map(([layout, r]) => `before ${layout} ${f0(r!.tps)} TPS (${share(r!)})`),
            ...(report.pgbenchClosing
              ? [`after the last layout ${f0(report.pgbenchClosing.tps)} TPS (${share(report.pgbenchClosing)})`]
              : []),
          ].join(", ") +
          ".",
        "",
      );
    }
  }
  const references = Object.entries(report.historyReference ?? {});
  if (references.length) {
    out.push(
      "**History reads as SQL alone** (the statements of an as-of read and of a statement page, through pgbench at concurrency 1, prepared, " +
        "on each layout's database right after its history entity was seeded):",
      ...references.map(([layout, r]) => `- ${layout}: ${historyReferenceText(r)}`),
      "",
    );
  }
  return out;
}

/** The webhook latency runs' table and each drain. */
function webhookLines(report: Report): string[] {
  const m = report.machine;
  const out: string[] = [];
  if (report.webhooks.length) {
    out.push(
      "**Webhooks** (one HTTPS receiver; commit = the transaction's RPC response, receipt = the receiver got its `transaction.created`):",
      "",
    );
    out.push(
      "| layout | rate asked | sent | achieved/s | p50 ms | p99 ms | max ms | missing | errors | CPU % ledger/hold/notif/gw/pg/nats/bench | CPU total |",
      "|---|---:|---:|---:|---:|---:|---:|---:|---|---|---:|",
    );
    for (const w of report.webhooks) {
      const cpu = w.cpu ? `${cpuText(w.cpu, w.layout)} | ${cpuTotal(w.cpu, w.layout, m.cores)}` : "— | —";
      out.push(
        `| ${w.layout ?? ""} | ${w.rate}/s | ${w.sent} | ${f0(w.achievedPerSecond)} | ${f0(w.p50)} | ${f0(w.p99)} | ${f0(w.max)} | ${w.missing} | ${errorsText(w.errors)} | ${cpu} |`,
      );
    }
    out.push("");
  }
  for (const d of report.drains) {
    out.push(
      `**Drain** (${d.when}): ${d.processes === 1 ? "one notification process" : `${d.processes} notification processes`} delivered a backlog of ${d.events} events in ${f2(d.seconds)} s: **${f0(d.perSecond)} deliveries/s**${d.missing ? `, ${d.missing} missing` : ""}, opening ${d.newConnections} new TLS connections to the receiver. ` +
        `CPU % ledger/hold/notif/gw/pg/nats/bench: ${cpuText(d.cpu, "processes")}, ${cpuTotal(d.cpu, "processes", m.cores)}.`,
      "",
    );
  }
  return out;
}

/** Peak RSS over the run, the invariants, unexpected errors, and whether the run passed. */
function outcomeLines(report: Report): string[] {
  const out: string[] = [];
  const processes = report.peakRssMb.processes;
  const one = report.peakRssMb["one-process"];
  if (processes)
    out.push(
      `**Peak RSS over the run, four processes** (MB): ledger ${f0(processes.ledger)}, hold ${f0(processes.hold)}, notification ${f0(processes.notification)}, gateway ${f0(processes.gateway)}.`,
      "",
    );
  if (one) out.push(`**Peak RSS over the run, one process** (\`npm start\`, MB): ${f0(one.ledger)}.`, "");
  out.push(
    report.invariants.ok
      ? "**Invariants**: hold (posted sums zero per program and currency, no negative available, stored balances match legs, `held` matches active holds, every event delivered exactly once)."
      : `**Invariants BROKEN**:\n${report.invariants.violations.map((v) => `- ${v}`).join("\n")}`,
  );
  if (report.unexpectedErrors.length) out.push("", `**Unexpected errors**:\n${report.unexpectedErrors.map((v) => `- ${v}`).join("\n")}`);
  out.push("", report.ok ? "Run: **passed**." : "Run: **FAILED**.");
  return out;
}

/** Each history read's reference: `as-of p50 1.0 ms, p99 2.0 ms (n reads)`, the workloads joined by semicolons. */
export function historyReferenceText(reference: Partial<Record<HistoryWorkloadName, HistoryReference>>): string {
  return HISTORY_WORKLOADS.flatMap((w) => {
    const r = reference[w];
    return r ? [`${w} p50 ${f1(r.p50Ms)} ms, p99 ${f1(r.p99Ms)} ms (${r.transactions} reads)`] : [];
  }).join("; ");
}

/** A titled table of targets, or nothing when the run measured none of them. */
function targetsTable(title: string, rows: Target[]): string[] {
  if (!rows.length) return [];
  return [
    title,
    "",
    "| target | measured | goal | met |",
    "|---|---|---|---|",
    ...rows.map((t) => `| ${t.target} | ${t.measured} | ${t.goal} | ${t.met ? "yes" : "**no**"} |`),
    "",
  ];
}

/** Batch calls' transfers per second against pgbench's TPS. */
const BATCH_GOAL = 1.4;
/** A history read's p99 at concurrency 1, whatever the entity's history (bench/README.md, "Targets"). */
const HISTORY_P99_GOAL_MS = 20;
/** Peak RSS of each service run apart, and of `npm start`'s one process, over the run (MB). */
const APART_RSS_GOAL_MB = 150;
const ONE_PROCESS_RSS_GOAL_MB = 200;

/** The pgbench run a layout's ratios divide by: the one right before it, or else the opening run. */
export function referenceOf(report: Report, layout: Layout): PgbenchResult | undefined {
  return report.pgbenchByLayout?.[layout] ?? report.pgbench;
}

/** One target of the report, against what the run measured. */
export interface Target {
  target: string;
  measured: string;
  goal: string;
  met: boolean;
}

/** How a target's text names each transport. */
const TRANSPORT_NAMES: Record<Transport, string> = { rest: "REST", h2load: "RPC (h2load)", rpc: "RPC (Connect's client)" };

/**
 * The runtime's targets (bench/README.md, "Targets"): transfers and batches in `npm start`'s one
 * process against pgbench, the p99 at concurrency 16, and each layout's peak RSS over the whole
 * run. A target whose cells this run did not measure is left out.
 */

export function runtimeTargets(report: Report): Target[] {
  const tps = referenceOf(report, "one-process")?.tps;
  return [...transferTargets(report, tps), ...batchTargets(report, tps), ...historyTargets(report), ...rssTargets(report)];
}

/** Transfers in the one process: REST and binary RPC at concurrency 64 against pgbench, and the p99 at 16. */
function transferTargets(report: Report, tps: number | undefined): Target[] {
  const rows: Target[] = [];
  const transfer = (transport: Transport, concurrency: number) =>
    report.cells.find(
      (c) => c.layout === "one-process" && c.workload === "transfer" && c.transport === transport && c.concurrency === concurrency,
    );
  // The RPC target judges the server: h2load's cells when the run has them (a client in C, as wrk
  // is for REST), with Connect's client beside them, whose own CPU per call is as much as the
  // ledger's (bench/README.md#the-load).
  const rest = transfer("rest", 64);
  const connect = transfer("rpc", 64);
  const h2load = transfer("h2load", 64);
  const rate = (cell: Cell) => `${f0(cell.perSecond)}/s = ${f2(cell.perSecond / (tps ?? 1))}x pgbench`;
  const meets = (cell: Cell, goal: number) => cell.perSecond >= goal * (tps ?? Infinity) && Object.keys(cell.errors).length === 0;
  if (rest && tps) rows.push({ target: "REST at concurrency 64", measured: rate(rest), goal: "≥ 0.6x pgbench TPS", met: meets(rest, 0.6) });
  const rpc = h2load ?? connect;
  if (rpc && tps) {
    rows.push({
      target: "RPC (binary, HTTP/2, straight to the ledger) at concurrency 64",
      measured: h2load
        ? `h2load: ${rate(h2load)}${connect ? `; Connect's client: ${rate(connect)}` : ""}`
        : `Connect's client: ${rate(rpc)}`,
      goal: "≥ 0.8x pgbench TPS",
      met: meets(rpc, 0.8),
    });
  }
  const tails = (["rest", "h2load", "rpc"] as const).flatMap((t) => {
    const cell = transfer(t, TAIL_CLIENTS);
    return cell ? [{ t, p99: cell.p99 }] : [];
  });
  if (tails.length) {
    rows.push({
      target: "p99 at concurrency 16",
      measured:
        tails.map(({ t, p99 }) => `${TRANSPORT_NAMES[t]} ${f1(p99)} ms`).join(", ") +
        (report.pgbench?.tail ? ` (pgbench -N at c=${report.pgbench.tail.clients}: ${f1(report.pgbench.tail.p99Ms)} ms)` : ""),
      goal: "< 25 ms",
      // Connect's client's tail is the client's own when h2load measured the server beside it.
      met: tails.every(({ t, p99 }) => p99 < 25 || (t === "rpc" && tails.some((x) => x.t === "h2load"))),
    });
  }
  return rows;
}

/** Batch calls in the one process against pgbench. */
function batchTargets(report: Report, tps: number | undefined): Target[] {
  const rows: Target[] = [];
  // Batches: each transport's best concurrency (the transfers per second batch calls can give);
  // both transports must be measured and meet it.
  const bestBatch = (["rest", "rpc"] as const).flatMap((t) => {
    const batchCells = report.cells.filter((c) => c.layout === "one-process" && c.workload === "batch" && c.transport === t);
    const best = batchCells.sort((a, b) => b.perSecond - a.perSecond)[0];
    return best ? [{ t, cell: best }] : [];
  });
  if (bestBatch.length && tps) {
    rows.push({
      target: "batches of 100 transfers, the best concurrency of each transport",
      measured: bestBatch
        .map(
          ({ t, cell }) =>
            `${t === "rest" ? "REST" : "RPC"} ${f0(cell.perSecond)}/s = ${f2(cell.perSecond / tps)}x (c=${cell.concurrency})`,
        )
        .join(", "),
      goal: `≥ ${BATCH_GOAL}x pgbench TPS`,
      met:
        bestBatch.length === 2 &&
        bestBatch.every(({ cell }) => cell.perSecond >= BATCH_GOAL * tps && Object.keys(cell.errors).length === 0),
    });
  }
  return rows;
}

/** History reads' p99 at concurrency 1. */
function historyTargets(report: Report): Target[] {
  const rows: Target[] = [];
  // History reads: every cell measured, in any layout and over every transport; as for transfers,
  // Connect's client's tail is the client's own when h2load measured the server beside it.
  for (const workload of HISTORY_WORKLOADS) {
    const cells = report.cells.filter((c) => c.workload === workload);
    if (!cells.length) continue;
    const judged = (c: Cell) => c.transport !== "rpc" || !cells.some((x) => x.layout === c.layout && x.transport === "h2load");
    // Shown beside the target, which stays the ledger's own p99: the machine's tail for the same SQL.
    const references = Object.entries(report.historyReference ?? {}).flatMap(([layout, r]) =>
      r[workload] ? [`${layout} p99 ${f1(r[workload].p99Ms)} ms`] : [],
    );
    rows.push({
      target: `${workload === "as-of" ? "balances as of a random moment" : `a statement page of ${STATEMENT_PAGE} entries`} of a long history, p99 at concurrency 1`,
      measured:
        cells.map((c) => `${c.layout} ${TRANSPORT_NAMES[c.transport]} ${f1(c.p99)} ms${judged(c) ? "" : " (not judged)"}`).join(", ") +
        (references.length ? ` (the same SQL alone through pgbench at c=1: ${references.join(", ")})` : ""),
      goal: `< ${HISTORY_P99_GOAL_MS} ms`,
      met: cells.every((c) => !judged(c) || (c.p99 < HISTORY_P99_GOAL_MS && Object.keys(c.errors).length === 0)),
    });
  }
  return rows;
}

/** Each layout's peak RSS over the whole run. */
function rssTargets(report: Report): Target[] {
  const rows: Target[] = [];
  const apart = report.peakRssMb.processes;
  if (apart) {
    const peak = Math.max(...Object.values(apart));
    rows.push({
      target: "peak RSS of each process apart, over the run",
      measured: `${f1(peak)} MB (${Object.entries(apart)
        .map(([service, mb]) => `${service} ${f1(mb)}`)
        .join(", ")})`,
      goal: `≤ ${APART_RSS_GOAL_MB} MB`,
      met: peak <= APART_RSS_GOAL_MB,
    });
  }
  const one = report.peakRssMb["one-process"];
  if (one) {
    rows.push({
      target: "peak RSS of the one process, over the run",
      measured: `${f1(one.ledger)} MB`,
      goal: `≤ ${ONE_PROCESS_RSS_GOAL_MB} MB`,
      met: one.ledger <= ONE_PROCESS_RSS_GOAL_MB,
    });
  }
  return rows;
}

/** The search target (bench/README.md, "Targets"): each measured cell's p99 against SEARCH_P99_GOAL_MS. */
export function searchTargets(cells: Cell[]): Target[] {
  return cells
    .filter((c) => isSearchWorkload(c.workload))
    .map((c) => ({
      target: `${c.transport === "rest" ? "REST" : "RPC"} at concurrency ${c.concurrency} (${c.layout})`,
      measured: `p99 ${c.p99.toFixed(1)} ms (p50 ${c.p50.toFixed(1)} ms, ${Math.round(c.perSecond)}/s)`,
      goal: `p99 < ${SEARCH_P99_GOAL_MS} ms`,
      met: c.p99 < SEARCH_P99_GOAL_MS && Object.keys(c.errors).length === 0,
    }));
}

/** Each webhook target against what this run measured. */
export function webhookTargets(report: Report): Target[] {
  const rows: Target[] = [];
  const tps = referenceOf(report, "processes")?.tps;
  const [one] = report.drains;
  // The two-process drain against the one-process drain run just before it, on the same database.
  const twoAt = report.drains.findIndex((d) => d.processes === 2);
  const two = twoAt > 0 ? report.drains[twoAt] : undefined;
  const oneBeforeTwo = twoAt > 0 ? report.drains[twoAt - 1] : undefined;
  if (one) {
    // Judged on the warm process (the one that ran the steady runs, its connections to the receiver
    // open), as a running service is; the drain on the fresh database also opens a connection per
    // slot, about 120 TLS handshakes inside a one-second drain, and is shown beside it.
    const warm = oneBeforeTwo ?? one;
    const ratioOf = (d: DrainResult) => (tps ? ` (${f2(d.perSecond / tps)}x pgbench)` : "");
    rows.push({
      target: `one process drains ${warm.events} events`,
      measured:
        warm === one
          ? `${f0(one.perSecond)}/s${ratioOf(one)}`
          : `warm: ${f0(warm.perSecond)}/s${ratioOf(warm)}; on the fresh database, opening ${one.newConnections} connections: ${f0(one.perSecond)}/s${ratioOf(one)}`,
      goal: "≥ 1x pgbench TPS",
      met: tps !== undefined && warm.perSecond >= tps && warm.missing === 0,
    });
  }
  const beside = report.slowBeside;
  if (beside) {
    rows.push({
      target: `commit-to-receipt p99 at ${beside.rate}/s (half pgbench) for ${f0(beside.alone.sent / beside.rate)} s`,
      measured: `${f0(beside.alone.p99)} ms (committed at ${f0(beside.alone.achievedPerSecond)}/s)`,
      goal: "< 1000 ms",
      met: beside.alone.p99 < 1000 && beside.alone.missing === 0,
    });
  }
  if (oneBeforeTwo && two) {
    const ratio = two.perSecond / Math.max(oneBeforeTwo.perSecond, 1e-9);
    const twice = report.invariants.violations.some((v) => v.includes("more than once"));
    rows.push({
      target: "two processes drain",
      measured: `${f0(two.perSecond)}/s = ${f2(ratio)}x one (${f0(oneBeforeTwo.perSecond)}/s just before, same database)${twice ? ", some events twice" : ", no event twice"}`,
      goal: "≥ 1.6x one, no attempt twice",
      met: ratio >= 1.6 && !twice && two.missing === 0,
    });
  }
  if (beside) {
    // "Does not move": within 20% or 50 ms of the p99 alone, whichever is larger (the machine is shared).
    const limit = Math.max(beside.alone.p99 * 1.2, beside.alone.p99 + 50);
    rows.push({
      target: `fast destination's p99 beside one answering after 2 s (${beside.slowReceived} slow requests)`,
      measured: `${f0(beside.beside.p99)} ms vs ${f0(beside.alone.p99)} ms alone`,
      goal: "does not move (≤ max(1.2x, +50 ms))",
      met: beside.beside.p99 <= limit && beside.beside.missing === 0,
    });
  }
  // The targets run in the processes layout: its peaks are the ones they are measured against.
  const processes = report.peakRssMb.processes;
  if (rows.length && processes) {
    const peak = Math.max(...Object.values(processes));
    rows.push({
      target: "peak RSS of any of the four processes over the run",
      measured: `${f0(peak)} MB`,
      goal: "≤ 250 MB",
      met: peak <= 250,
    });
  }
  return rows;
}

/** JSON.stringify that never meets a bigint (money is bigint inside, numbers in the report). */
export function toJson(report: Report): string {
  return JSON.stringify(report, (_key, value: unknown) => (typeof value === "bigint" ? value.toString() : value), 2) + "\n";
}
