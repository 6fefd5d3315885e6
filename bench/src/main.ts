// `pnpm bench`: pgbench as the reference, then, in each layout (four processes, one process), the
// ledger's workloads through REST (wrk) and RPC (Connect's client) and webhooks; checks the
// invariants and writes bench/results/{latest,smoke}.{json,md}.
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { startWebhookReceiver } from "@ledger/testing";
import postgres from "postgres";
import { type RunContext, type RunFiles, RunRecord } from "./layout-context.js";
import { runLayout } from "./layout-run.js";
import { type PgbenchResult, runPgbench, TAIL_CLIENTS } from "./pgbench.js";
import { endProgress, progress } from "./progress.js";
import { type Report, toJson, toMarkdown } from "./report.js";
import { readSettings, type Settings } from "./settings.js";

const repoRoot = fileURLToPath(new URL("../../", import.meta.url));
const resultsDir = fileURLToPath(new URL("../results/", import.meta.url));

/** Fails early, with how to install it, when a load generator the chosen cells need is missing. */
function checkLoadGenerators(settings: Settings): void {
  const wrk = process.env["WRK"] ?? "wrk";
  if (settings.workloads.length && settings.transports.includes("rest") && spawnSync(wrk, ["--version"]).error)
    throw new Error(`the REST cells need wrk (${wrk} did not start): bash scripts/ensure-bench-tools.sh installs it`);
  if (settings.workloads.length && settings.transports.includes("h2load") && spawnSync("h2load", ["--version"]).error)
    throw new Error("the h2load cells need h2load (Debian's nghttp2-client): bash scripts/ensure-bench-tools.sh installs it");
}

/**
 * The database and NATS the run uses, refusing anything off this machine; with the database's name
 * and the URL of the server's `postgres` database, from which the bench drops and recreates it.
 */
function localUrls(): { databaseUrl: string; databaseName: string; adminUrl: string; natsUrl: string } {
  const databaseUrl = process.env["BENCH_DATABASE_URL"] ?? "postgres://root@127.0.0.1:5432/ledger_bench";
  const natsUrl = process.env["NATS_URL"] ?? "nats://127.0.0.1:4222";
  for (const url of [databaseUrl, natsUrl]) {
    // The bench generates heavy traffic: make sure none of it leaves the machine.
    if (new URL(url).hostname !== "127.0.0.1" && new URL(url).hostname !== "localhost")
      throw new Error(`the bench only runs against 127.0.0.1, not ${url}`);
  }
  const databaseName = decodeURIComponent(new URL(databaseUrl).pathname.slice(1));
  const adminUrl = new URL(databaseUrl);
  adminUrl.pathname = "/postgres";
  return { databaseUrl, databaseName, adminUrl: adminUrl.toString(), natsUrl };
}

/** pgbench on the bench's database, alone on the machine, printed as it ends. */
async function measureReference(
  settings: Settings,
  admin: postgres.Sql,
  adminUrl: string,
  databaseName: string,
  when: string,
  tail: boolean,
): Promise<PgbenchResult> {
  progress(
    `pgbench ${when}: init scale ${settings.pgbenchScale}, then ${settings.pgbenchSeconds} s with 32 clients` +
      (tail ? `, then ${settings.pgbenchSeconds} s of -N with ${TAIL_CLIENTS} for the latency reference` : ""),
  );
  const result = await runPgbench(admin, adminUrl, databaseName, settings.pgbenchScale, settings.pgbenchSeconds, { tail });
  endProgress();
  console.log(
    `pgbench ${when}: ${Math.round(result.tps)} TPS (scale ${result.scale}, ${result.clients} clients, ${result.seconds} s, latency avg ${result.latencyMs.toFixed(2)} ms)`,
  );
  if (result.tail) {
    const t = result.tail;
    console.log(`pgbench -N, ${t.clients} clients: ${Math.round(t.tps)} TPS, p50 ${t.p50Ms.toFixed(1)} ms, p99 ${t.p99Ms.toFixed(1)} ms`);
  }
  return result;
}

/**
 * The files the load generators read, in a directory of the run's own under the system's temporary
 * directory (a run stopped by a signal leaves it there, not in the repository); `remove` deletes it.
 */
function runFiles(): RunFiles & { remove(): void } {
  const dir = mkdtempSync(join(tmpdir(), "ledger-bench-"));
  const h2loadDir = join(dir, "h2load");
  mkdirSync(h2loadDir);
  const files = {
    caFile: join(dir, "receiver-ca.pem"),
    entitiesFile: join(dir, "entities.txt"),
    h2loadDir,
    momentsFile: join(dir, "moments.txt"),
  };
  return Object.assign(files, { remove: () => rmSync(dir, { recursive: true, force: true }) });
}

/** The report of the whole run, from what it gathered. */
function buildReport(
  settings: Settings,
  record: RunRecord,
  runStarted: number,
  pgbench: PgbenchResult | undefined,
  closingReference: PgbenchResult | undefined,
): Report {
  const { historyReference, beside, violations, unexpectedErrors } = record;
  return {
    date: new Date(runStarted).toISOString(),
    smoke: settings.smoke,
    machine: record.machine!,
    settings: {
      warmupS: settings.warmupS,
      durationS: settings.durationS,
      concurrency: settings.concurrency,
      entities: settings.entities,
      perCellPeakRss: record.perCellPeakRss,
      layouts: settings.layouts,
    },
    ...(pgbench ? { pgbench, pgbenchByLayout: record.layoutReferences } : {}),
    ...(closingReference ? { pgbenchClosing: closingReference } : {}),
    ...(Object.keys(historyReference).length ? { historyReference } : {}),
    cells: record.cells,
    webhooks: record.webhooks,
    drains: record.drains,
    ...(beside ? { slowBeside: beside } : {}),
    peakRssMb: record.peaks,
    invariants: { ok: violations.length === 0, violations },
    unexpectedErrors,
    ok: violations.length === 0 && unexpectedErrors.length === 0,
  };
}

/** Writes the report as JSON and Markdown, and prints the Markdown. */
function writeReport(settings: Settings, report: Report, runStarted: number): void {
  const name = settings.smoke ? "smoke" : "latest";
  const markdown = toMarkdown(report);
  writeFileSync(join(resultsDir, `${name}.json`), toJson(report));
  writeFileSync(join(resultsDir, `${name}.md`), markdown);
  console.log(`\n${markdown}`);
  console.log(`written: bench/results/${name}.json and ${name}.md (${((Date.now() - runStarted) / 1000).toFixed(0)} s in all)`);
}

async function main(): Promise<number> {
  const settings = readSettings(process.argv.slice(2));
  checkLoadGenerators(settings);
  const { databaseUrl, databaseName, adminUrl, natsUrl } = localUrls();
  const admin = postgres(adminUrl, { max: 1, onnotice: () => {} });
  const runStarted = Date.now();

  // 1. The reference, alone on the machine: the opening run (with the latency reference), then a
  // TPC-B run right before each later layout, and one after the last. Each layout's `x pgbench`
  // divides by the run just before it: a shared machine's speed drifts over a long run, and a
  // reference taken half an hour before a cell says less of it (bench/README.md#method).
  const reference = (when: string, tail: boolean) => measureReference(settings, admin, adminUrl, databaseName, when, tail);
  const pgbench = settings.pgbench ? await reference("(opening)", true) : undefined;

  // 2. The webhook receiver, shared by every layout; then each layout on a fresh database and stream.
  const receiver = await startWebhookReceiver();
  const files = runFiles();
  mkdirSync(resultsDir, { recursive: true });
  writeFileSync(files.caFile, receiver.ca);
  const record = new RunRecord();
  const run: RunContext = { settings, databaseUrl, databaseName, natsUrl, repoRoot, receiver, files, record };
  try {
    for (const [index, layout] of settings.layouts.entries()) {
      let layoutReference = pgbench;
      if (pgbench && index > 0) {
        layoutReference = await reference(`before ${layout}`, false);
        record.layoutReferences[layout] = layoutReference;
      }
      // 3. to 5.: the closed-loop workloads, the webhooks, the invariants.
      await runLayout(run, layout, layoutReference, admin);
    }
    const closingReference = pgbench ? await reference("(closing)", false) : undefined;
    const report = buildReport(settings, record, runStarted, pgbench, closingReference);
    writeReport(settings, report, runStarted);
    return report.ok ? 0 : 1;
  } finally {
    await receiver.close();
    await admin.end({ timeout: 5 });
    files.remove();
  }
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    endProgress();
    console.error(`bench failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
    process.exit(1);
  },
);
