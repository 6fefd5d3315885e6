// `pnpm bench`: pgbench as the reference, then, in each layout (four processes, one process), the
// ledger's workloads through REST (wrk) and RPC (Connect's client) and webhooks; checks the
// invariants and writes bench/results/{latest,smoke}.{json,md}.
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { createAccount } from "@ledger/ledger-service";
import { schemaClient } from "@ledger/e2e";
import { startWebhookReceiver } from "@ledger/testing";
import postgres from "postgres";
import {
  ACCOUNT_WORKLOADS,
  accountsOperation,
  createAccountFixtures,
  isAccountWorkload,
  ONE_ACCOUNT_ENV,
  type AccountFixtures,
  type AccountWorkloadName,
} from "./account-workloads.js";
import { backlogProbe } from "./backlog.js";
import { type LoopResult, runClosedLoop } from "./closed-loop.js";
import { REQUEST_TIMEOUT_MS, rpcClients } from "./connect.js";
import { deliveryViolations, moneyViolations } from "./invariants.js";
import { runPgbench, TAIL_CLIENTS, type PgbenchResult } from "./pgbench.js";
import { cellsTable, historyReferenceText, machineInfo, toJson, toMarkdown, type Cell, type Report } from "./report.js";
import {
  cpuPercent,
  type CpuSource,
  LAYOUTS,
  peakRssMb,
  resetPeakRss,
  SERVICES,
  startSystem,
  type Layout,
  type ServiceName,
} from "./system.js";
import {
  drain,
  DeliveryTracker,
  HOOK_PATH,
  pacedLatency,
  slowBeside,
  type DrainResult,
  type SlowBeside,
  type WebhookLatency,
} from "./webhooks.js";
import {
  BATCH_CONCURRENCY,
  BATCH_ITEMS,
  BATCH_WORKLOADS,
  isBatchWorkload,
  rpcBatchOperation,
  type BatchWorkloadName,
} from "./batch-workloads.js";
import {
  HISTORY_CONCURRENCY,
  HISTORY_LEGS,
  HISTORY_WORKLOADS,
  isHistoryWorkload,
  rpcHistoryOperation,
  seedHistory,
  type HistoryFixture,
  type HistoryWorkloadName,
} from "./history-workloads.js";
import { runHistoryReference } from "./history-reference.js";
import { createFixtures, rpcOperation, WORKLOADS, type Transport, type WorkloadName } from "./workloads.js";
import {
  isSearchWorkload,
  rpcSearchOperation,
  SEARCH_CONCURRENCY,
  SEARCH_GROUPS,
  SEARCH_VALUES,
  SEARCH_WORKLOADS,
  seedSearch,
  type SearchWorkloadName,
} from "./search-workload.js";
import { runWrk } from "./wrk.js";
import { H2LOAD_WORKLOADS, runH2load, type H2loadOptions } from "./h2load.js";

const ALL_WORKLOADS = [...WORKLOADS, ...BATCH_WORKLOADS, ...HISTORY_WORKLOADS, ...SEARCH_WORKLOADS, ...ACCOUNT_WORKLOADS];

const USAGE = `usage: pnpm bench [--duration S] [--warmup S] [--concurrency 1,16,64] [--only LIST] [--transport rest,rpc] [--layout L] [--smoke]

  --duration S       measured seconds per workload, transport and concurrency (default 10)
  --warmup S         seconds before each measurement (default 2)
  --concurrency L    closed-loop workers, comma-separated (default 1,16,64)
  --only LIST        any of pgbench,${ALL_WORKLOADS.join(",")},webhooks (default all)
                     (batch and batch-hot run at concurrency 1,4,16; as-of, statement and
                     search at 1, whatever --concurrency says; accounts and accounts-one
                     over rpc in the processes layout only)
  --transport L      rest (wrk through the gateway), rpc (Connect's client straight to the
                     services), h2load (h2load straight to the ledger: transfer, deposit,
                     hot, as-of and statement only); any of them (default rest,rpc,h2load)
  --layout L         processes (four, as deployed), one-process (as npm start runs it), or both
                     (default processes,one-process; the drains and the webhook targets run in
                     the processes layout only)
  --pgbench-time S   pgbench -T (default the --duration, at least 5)
  --steady S         seconds of each steady webhook run, alone and beside the slow destination (default 20)
  --smoke            everything briefly, for CI: a few seconds in all; numbers mean nothing
Environment: BENCH_DATABASE_URL (default postgres://root@127.0.0.1:5432/ledger_bench, recreated
each run), NATS_URL (default nats://127.0.0.1:4222), PGBENCH and WRK (default pgbench and wrk on
PATH), BENCH_LOG_LEVEL (the services' LOG_LEVEL, default warn; info logs every delivery attempt).`;

const repoRoot = fileURLToPath(new URL("../../", import.meta.url));
const resultsDir = fileURLToPath(new URL("../results/", import.meta.url));

interface Settings {
  smoke: boolean;
  durationS: number;
  warmupS: number;
  concurrency: number[];
  workloads: Array<WorkloadName | BatchWorkloadName | HistoryWorkloadName | SearchWorkloadName | AccountWorkloadName>;
  transports: Transport[];
  layouts: Layout[];
  pgbench: boolean;
  pgbenchScale: number;
  pgbenchSeconds: number;
  webhooks: boolean;
  webhookRates: number[];
  webhookSeconds: number;
  /** Seconds of the steady run at half pgbench's TPS (once alone, once beside a slow destination). */
  webhookSteadySeconds: number;
  drainEvents: number;
  entities: number;
  /** Posted legs of the history workloads' entity. */
  historyLegs: number;
  /** Groups the search workload runs among. */
  searchGroups: number;
  /** How long to let the previous cell's events flow out before the next cell starts. */
  settleMs: number;
}

function readSettings(argv: string[]): Settings {
  const { values } = parseArgs({
    args: argv,
    options: {
      duration: { type: "string" },
      warmup: { type: "string" },
      concurrency: { type: "string" },
      only: { type: "string" },
      transport: { type: "string" },
      layout: { type: "string" },
      "pgbench-time": { type: "string" },
      steady: { type: "string" },
      smoke: { type: "boolean", default: false },
      help: { type: "boolean", short: "h" },
    },
  });
  if (values.help) {
    console.log(USAGE);
    process.exit(0);
  }
  const smoke = values.smoke ?? false;
  const number = (raw: string | undefined, fallback: number, name: string) => {
    if (raw === undefined) return fallback;
    const n = Number(raw);
    if (!Number.isFinite(n) || n <= 0 || n > 3600) throw new Error(`--${name} must be a number of seconds above 0, got ${raw}\n\n${USAGE}`);
    return n;
  };
  const list = (raw: string | undefined, fallback: string[]) =>
    raw === undefined
      ? fallback
      : raw
          .split(",")
          .map((s) => s.trim())
          .filter(Boolean);
  const only = list(values.only, ["pgbench", ...ALL_WORKLOADS, "webhooks"]);
  const known = new Set<string>(["pgbench", ...ALL_WORKLOADS, "webhooks"]);
  const unknown = only.filter((o) => !known.has(o));
  if (unknown.length) throw new Error(`--only: unknown ${unknown.join(", ")}\n\n${USAGE}`);
  const concurrency = list(values.concurrency, smoke ? ["16"] : ["1", "16", "64"]).map(Number);
  if (concurrency.some((c) => !Number.isInteger(c) || c < 1 || c > 1024))
    throw new Error(`--concurrency must list integers 1 to 1024\n\n${USAGE}`);
  const transports = list(values.transport, ["rest", "rpc", "h2load"]);
  if (transports.some((t) => t !== "rest" && t !== "rpc" && t !== "h2load"))
    throw new Error(`--transport takes rest, rpc and/or h2load\n\n${USAGE}`);
  const layouts = list(values.layout, [...LAYOUTS]);
  if (layouts.length === 0 || layouts.some((l) => !(LAYOUTS as readonly string[]).includes(l)))
    throw new Error(`--layout takes ${LAYOUTS.join(" and/or ")}\n\n${USAGE}`);
  const durationS = number(values.duration, smoke ? 0.4 : 10, "duration");
  return {
    smoke,
    durationS,
    warmupS: number(values.warmup, smoke ? 0.1 : 2, "warmup"),
    concurrency,
    workloads: ALL_WORKLOADS.filter((w) => only.includes(w)),
    transports: transports as Transport[],
    layouts: LAYOUTS.filter((l) => layouts.includes(l)),
    pgbench: only.includes("pgbench"),
    pgbenchScale: smoke ? 1 : 10,
    pgbenchSeconds: Math.round(number(values["pgbench-time"], smoke ? 1 : Math.max(5, durationS), "pgbench-time")),
    webhooks: only.includes("webhooks"),
    webhookRates: [200],
    webhookSeconds: smoke ? 0.5 : 5,
    webhookSteadySeconds: number(values.steady, smoke ? 0.5 : 20, "steady"),
    drainEvents: smoke ? 100 : 10_000,
    entities: smoke ? 64 : 1000,
    historyLegs: smoke ? 5_000 : HISTORY_LEGS,
    searchGroups: smoke ? 10 * SEARCH_VALUES : SEARCH_GROUPS,
    settleMs: smoke ? 1_000 : 10_000,
  };
}

/** One status line that rewrites itself on a terminal and is a plain line in CI logs. */
function progress(line: string): void {
  if (process.stderr.isTTY) process.stderr.write(`\r\x1b[2K${line}`);
  else process.stderr.write(`${line}\n`);
}
function endProgress(): void {
  if (process.stderr.isTTY) process.stderr.write("\r\x1b[2K");
}

/** JSON calls of the gateway for one API key, through node's fetch: the webhook destinations' set-up. */
function gatewayJson(restUrl: string, apiKey: string) {
  return async <T>(method: string, path: string, body: unknown): Promise<T> => {
    const res = await fetch(`${restUrl}${path}`, {
      method,
      headers: { authorization: apiKey, "content-type": "application/json" },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
    });
    const answer = (await res.json()) as T;
    if (!res.ok) throw new Error(`${method} ${path} answered ${res.status}: ${JSON.stringify(answer)}`);
    return answer;
  };
}

/** Failures of two runs together (a cell's warm-up and its window). */
function addErrors(into: Record<string, number>, more: Record<string, number>): Record<string, number> {
  for (const [code, n] of Object.entries(more)) into[code] = (into[code] ?? 0) + n;
  return into;
}

async function main(): Promise<number> {
  const settings = readSettings(process.argv.slice(2));
  const wrk = process.env["WRK"] ?? "wrk";
  if (settings.workloads.length && settings.transports.includes("rest") && spawnSync(wrk, ["--version"]).error)
    throw new Error(`the REST cells need wrk (${wrk} did not start): bash scripts/ensure-bench-tools.sh installs it`);
  if (settings.workloads.length && settings.transports.includes("h2load") && spawnSync("h2load", ["--version"]).error)
    throw new Error("the h2load cells need h2load (Debian's nghttp2-client): bash scripts/ensure-bench-tools.sh installs it");
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
  const admin = postgres(adminUrl.toString(), { max: 1, onnotice: () => {} });
  const runStarted = Date.now();

  // 1. The reference, alone on the machine: the opening run (with the latency reference), then a
  // TPC-B run right before each later layout, and one after the last. Each layout's `x pgbench`
  // divides by the run just before it: a shared machine's speed drifts over a long run, and a
  // reference taken half an hour before a cell says less of it (bench/README.md#method).
  const measureReference = async (when: string, tail: boolean): Promise<PgbenchResult> => {
    progress(
      `pgbench ${when}: init scale ${settings.pgbenchScale}, then ${settings.pgbenchSeconds} s with 32 clients` +
        (tail ? `, then ${settings.pgbenchSeconds} s of -N with ${TAIL_CLIENTS} for the latency reference` : ""),
    );
    const result = await runPgbench(admin, adminUrl.toString(), databaseName, settings.pgbenchScale, settings.pgbenchSeconds, { tail });
    endProgress();
    console.log(
      `pgbench ${when}: ${Math.round(result.tps)} TPS (scale ${result.scale}, ${result.clients} clients, ${result.seconds} s, latency avg ${result.latencyMs.toFixed(2)} ms)`,
    );
    if (result.tail) {
      const t = result.tail;
      console.log(`pgbench -N, ${t.clients} clients: ${Math.round(t.tps)} TPS, p50 ${t.p50Ms.toFixed(1)} ms, p99 ${t.p99Ms.toFixed(1)} ms`);
    }
    return result;
  };
  const pgbench = settings.pgbench ? await measureReference("(opening)", true) : undefined;
  const layoutReferences: Partial<Record<Layout, PgbenchResult>> = {};
  let closingReference: PgbenchResult | undefined;

  // 2. The webhook receiver, shared by every layout; then each layout on a fresh database and stream.
  const receiver = await startWebhookReceiver();
  const caFile = join(repoRoot, "bench", "results", `.receiver-ca-${process.pid}.pem`);
  // The entities the REST cells' bodies draw from (rest-load.lua), one id a line.
  const entitiesFile = join(repoRoot, "bench", "results", `.entities-${process.pid}.txt`);
  // The h2load cells' request bodies and per-request logs.
  const h2loadDir = mkdtempSync(join(tmpdir(), "ledger-bench-h2load-"));
  // The history entity's moments, one a line, that the history workloads' REST requests draw from.
  const momentsFile = join(repoRoot, "bench", "results", `.moments-${process.pid}.txt`);
  mkdirSync(resultsDir, { recursive: true });
  writeFileSync(caFile, receiver.ca);
  const cells: Cell[] = [];
  const webhooks: WebhookLatency[] = [];
  const drains: DrainResult[] = [];
  let beside: SlowBeside | undefined;
  const unexpectedErrors: string[] = [];
  const violations: string[] = [];
  const peaks = {} as Partial<Record<Layout, Record<ServiceName, number>>>;
  const historyReference: NonNullable<Report["historyReference"]> = {};
  let perCellPeakRss = true;
  let machine: Report["machine"] | undefined;
  try {
    for (const [index, layout] of settings.layouts.entries()) {
      let reference = pgbench;
      if (pgbench && index > 0) {
        reference = await measureReference(`before ${layout}`, false);
        layoutReferences[layout] = reference;
      }
      const ratioOf = (perSecond: number) => (reference ? perSecond / reference.tps : 0);
      await admin.unsafe(`drop database if exists "${databaseName.replace(/"/g, '""')}" with (force)`);
      progress(
        layout === "processes"
          ? "starting ledger, hold, notification and gateway as four processes"
          : "starting everything in one process (dist/start-all.js)",
      );
      const system = await startSystem({ databaseUrl, natsUrl, repoRoot, caFile, layout });
      endProgress();
      console.log(`\n${layout}: system up (logs in ${system.logDir})`);
      const sql = schemaClient(databaseUrl, "ledger", 4);
      const probe = await backlogProbe(sql as unknown as postgres.Sql, natsUrl, system.stream);
      const overallPeak = Object.fromEntries(SERVICES.map((s) => [s, 0])) as Record<ServiceName, number>;
      peaks[layout] = overallPeak;
      const notePeaks = () => {
        const now = {} as Record<ServiceName, number>;
        for (const s of SERVICES) {
          now[s] = peakRssMb(system.pids[s]) ?? 0;
          overallPeak[s] = Math.max(overallPeak[s], now[s]);
        }
        return now;
      };
      try {
        const [versionRow] = await sql<{ v: string }[]>`select split_part(version(), ' on ', 1) as v`;
        machine ??= machineInfo(versionRow?.v ?? "unknown", probe.natsVersion());
        // createAccount takes the ledger's own Sql type; this client is the same postgres.js client.
        const mainAccount = await createAccount(sql as never, "bench");
        const hookAccount = await createAccount(sql as never, "bench webhooks");
        const rpc = rpcClients(system.urls.ledger, system.urls.hold, mainAccount.api_key);
        /** Bytes of WAL the server has written so far, for the WAL each transfer costs (docs/scaling.md). */
        const walPosition = async () =>
          Number((await sql<{ b: string }[]>`select pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::text as b`)[0]?.b ?? 0);
        // The search's account, seeded before its first cell (after the money workloads, which it leaves alone).
        let search: { accountId: string; apiKey: string; rpc: ReturnType<typeof rpcClients> } | undefined;
        const searchAccount = async () => {
          if (search) return search;
          const account = await createAccount(sql as never, "bench search");
          search = {
            accountId: account.account_id,
            apiKey: account.api_key,
            rpc: rpcClients(system.urls.ledger, system.urls.hold, account.api_key),
          };
          progress(`search: seeding ${settings.searchGroups} groups with their legs`);
          const started = performance.now();
          const { entity } = await search.rpc.ledger.createEntity({ entityName: "bench search", entityType: "customer" });
          const { program } = await search.rpc.ledger.getProgram({});
          await seedSearch(
            sql,
            {
              accountId: account.account_id,
              programId: account.program_id,
              externalEntityId: program!.externalEntityId,
              entityId: entity!.entityId,
            },
            settings.searchGroups,
          );
          endProgress();
          console.log(`search: seeded ${settings.searchGroups} groups in ${((performance.now() - started) / 1000).toFixed(1)} s`);
          return search;
        };

        // The accounts workloads' accounts, created before their first cell; and for accounts-one,
        // a second ledger process with one account per transaction.
        let accountFixtures: AccountFixtures | undefined;
        let oneAccountLedger: string | undefined;
        const accountsLedger = async (workload: string) => {
          accountFixtures ??= await createAccountFixtures(
            (name) => createAccount(sql as never, name),
            system.urls.ledger,
            system.urls.hold,
          );
          if (workload === "accounts") return system.urls.ledger;
          oneAccountLedger ??= (await system.startLedgerReplica(ONE_ACCOUNT_ENV)).url;
          return oneAccountLedger;
        };

        // 3. The closed-loop workloads.
        if (settings.workloads.length) {
          progress(`creating and funding ${settings.entities} entities`);
          const fixtures = await createFixtures(rpc, settings.entities);
          writeFileSync(entitiesFile, `${fixtures.entities.join("\n")}\n`);
          endProgress();
          console.log(`\n${cellsTable([]).split("\n").join("\n")}`);
          let history: HistoryFixture | undefined;
          for (const workload of settings.workloads) {
            if (isHistoryWorkload(workload) && !history) {
              progress(`seeding an entity with ${settings.historyLegs} posted legs for the history reads`);
              history = await seedHistory(rpc, fixtures, settings.historyLegs);
              writeFileSync(momentsFile, `${history.moments.join("\n")}\n`);
              // Its events flow out before the reads are measured, as the webhook runs wait for theirs.
              await probe.settle(180_000);
              endProgress();
              console.log(`history entity: ${history.moments.length} posted legs at ${new Set(history.moments).size} distinct moments`);
              // The same reads as SQL alone, on the same database and now, before the ledger's cells.
              const referenceSeconds = settings.smoke ? 1 : Math.max(5, Math.round(settings.durationS));
              const workloads = settings.workloads.filter(isHistoryWorkload);
              progress(`history reference: ${workloads.join(" and ")} as SQL alone through pgbench at c=1, ${referenceSeconds} s each`);
              const [entity] = await sql<{ account_id: string; program_id: string }[]>`
                select account_id, program_id from entities where id = ${history.entityId}`;
              const reference = await runHistoryReference({
                databaseUrl,
                entity: { entityId: history.entityId, accountId: entity!.account_id, programId: entity!.program_id },
                moments: history.moments,
                workloads,
                seconds: referenceSeconds,
              });
              historyReference[layout] = reference;
              endProgress();
              console.log(`history reference (the same SQL alone through pgbench, c=1): ${historyReferenceText(reference)}`);
            }
            for (const transport of settings.transports) {
              if (transport === "h2load" && !H2LOAD_WORKLOADS.includes(workload)) continue;
              // The accounts pair compares two ledger processes side by side: over RPC, with processes apart.
              if (isAccountWorkload(workload) && (transport !== "rpc" || layout !== "processes")) continue;
              const accountsUrl = isAccountWorkload(workload) ? await accountsLedger(workload) : undefined;
              const accounts = accountsUrl ? accountsOperation(accountFixtures!, accountsUrl, system.urls.hold) : undefined;
              // A batch call is 100 transfers: its cells are concurrency 1, 4 and 16 (4 in a smoke run).
              // A history read is measured for one reader: concurrency 1.
              const batch = isBatchWorkload(workload);
              const historyRead = isHistoryWorkload(workload);
              const searching = isSearchWorkload(workload) ? await searchAccount() : undefined;
              const levels = batch
                ? settings.smoke
                  ? [4]
                  : BATCH_CONCURRENCY
                : historyRead
                  ? HISTORY_CONCURRENCY
                  : searching
                    ? SEARCH_CONCURRENCY
                    : settings.concurrency;
              for (const concurrency of levels) {
                const label = `${workload} ${transport} c=${concurrency}`;
                const settled = await probe.settle(settings.settleMs);
                if (settled.waitedMs > 1_000)
                  progress(`${label}: waited ${(settled.waitedMs / 1000).toFixed(1)} s for the previous events to flow out`);
                for (const s of SERVICES) if (!resetPeakRss(system.pids[s])) perCellPeakRss = false;
                const total = settings.warmupS + settings.durationS;
                const storedBefore = await probe.storedEvents();
                const cellStarted = performance.now();
                let result: LoopResult;
                let cpu: Record<CpuSource, number>;
                // Where Postgres's WAL stood when the measured window began (every database of the server).
                let walStart: number | undefined;
                if (transport === "h2load") {
                  // h2load, twice, as wrk below: the warm-up, then the measured window.
                  const h2loadRun = (seconds: number) =>
                    runH2load({
                      ledgerUrl: system.urls.ledger,
                      apiKey: mainAccount.api_key,
                      workload: workload as H2loadOptions["workload"],
                      concurrency,
                      seconds,
                      fixtures,
                      ...(history ? { history } : {}),
                      dir: h2loadDir,
                    });
                  progress(`${label}: h2load, ${total} s`);
                  const warmup = await h2loadRun(settings.warmupS);
                  walStart = await walPosition();
                  const windowCpu = system.cpuSnapshot();
                  const run = await h2loadRun(settings.durationS);
                  cpu = cpuPercent(windowCpu, system.cpuSnapshot());
                  cpu.bench += Math.round((run.cpuSeconds / settings.durationS) * 100);
                  result = { ...run, errors: addErrors(addErrors({}, warmup.errors), run.errors) };
                } else if (transport === "rest") {
                  // wrk, twice: the warm-up, then the measured window with the CPU read around it.
                  const wrkRun = (seconds: number) =>
                    runWrk({
                      restUrl: system.restUrl,
                      apiKey: searching?.apiKey ?? mainAccount.api_key,
                      workload,
                      concurrency,
                      seconds,
                      entitiesFile: historyRead ? momentsFile : entitiesFile,
                      hot: historyRead ? history!.entityId : fixtures.hot,
                      ...(searching ? { searchValues: SEARCH_VALUES } : {}),
                    });
                  progress(`${label}: wrk, ${total} s`);
                  const warmup = await wrkRun(settings.warmupS);
                  walStart = await walPosition();
                  const windowCpu = system.cpuSnapshot();
                  const run = await wrkRun(settings.durationS);
                  cpu = cpuPercent(windowCpu, system.cpuSnapshot());
                  // wrk is the load generator of these cells: its CPU, from its own clock, joins this process's.
                  cpu.bench += Math.round((run.cpuSeconds / run.seconds) * 100);
                  result = {
                    ok: run.ok,
                    perSecond: run.units / run.seconds,
                    p50: run.p50,
                    p95: run.p95,
                    p99: run.p99,
                    max: run.max,
                    errors: addErrors(addErrors({}, warmup.errors), run.errors),
                  };
                } else {
                  let windowCpu = system.cpuSnapshot();
                  const cpuTimer = setTimeout(() => {
                    windowCpu = system.cpuSnapshot();
                    walPosition().then(
                      (at) => (walStart = at),
                      () => {},
                    );
                  }, settings.warmupS * 1000);
                  result = await runClosedLoop({
                    concurrency,
                    warmupMs: settings.warmupS * 1000,
                    durationMs: settings.durationS * 1000,
                    operation: accounts
                      ? accounts.operation
                      : searching
                        ? rpcSearchOperation(searching.rpc)
                        : batch
                          ? rpcBatchOperation(workload, rpc, fixtures)
                          : isHistoryWorkload(workload)
                            ? rpcHistoryOperation(workload, rpc, history!)
                            : rpcOperation(workload as WorkloadName, rpc, fixtures),
                    onProgress: (ms, ok, failed) =>
                      progress(`${label}: ${(ms / 1000).toFixed(0)}/${total} s, ${ok} ok in window, ${failed} errors`),
                  });
                  clearTimeout(cpuTimer);
                  cpu = cpuPercent(windowCpu, system.cpuSnapshot());
                }
                const walEnd = await walPosition();
                const left = await probe.read();
                // Throughput of a batch workload is in transfers (items), latencies are per call.
                const itemsPerCall = batch ? BATCH_ITEMS : 1;
                const storedDuring = (await probe.storedEvents()) - storedBefore;
                const cellSeconds = (performance.now() - cellStarted) / 1000;
                // The cell's own backlog, waited for here rather than before the next cell, so its time is this cell's.
                const drained = await probe.settle(settings.settleMs);
                const cell: Cell = {
                  layout,
                  workload,
                  transport,
                  concurrency,
                  ...result,
                  itemsPerCall,
                  ratio: ratioOf(result.perSecond),
                  walBytesPerUnit:
                    walStart === undefined || result.perSecond === 0
                      ? undefined
                      : (walEnd - walStart) / (result.perSecond * settings.durationS),
                  rssMb: notePeaks(),
                  cpu,
                  backlogAfter: left.outbox + left.consumer,
                  eventsStoredPerSecond: storedDuring / cellSeconds,
                  drainedMs: drained.waitedMs,
                };
                cells.push(cell);
                accounts?.close();
                for (const [code, n] of Object.entries(result.errors)) unexpectedErrors.push(`${layout} ${label}: ${n} × ${code}`);
                endProgress();
                console.log(cellsTable([cell]).split("\n")[2]);
              }
            }
          }
        }
        rpc.close();
        search?.rpc.close();

        // 4. Webhooks, in an account of their own so the workloads above queue no deliveries.
        let tracker: DeliveryTracker | undefined;
        let hookEndpoint: string | undefined;
        if (settings.webhooks) {
          tracker = new DeliveryTracker(receiver);
          const hookApi = gatewayJson(system.restUrl, hookAccount.api_key);
          const hookRpc = rpcClients(system.urls.ledger, system.urls.hold, hookAccount.api_key);
          try {
            const hook = await hookApi<{ endpoint: { endpoint_id: string } }>("POST", "/webhooks", {
              url: receiver.endpoint(HOOK_PATH),
              name: `bench receiver (${layout})`,
            });
            hookEndpoint = hook.endpoint.endpoint_id;
            const hookFixtures = await createFixtures(hookRpc, 50);
            progress("webhooks: waiting for the workloads' events to be consumed first");
            const settled = await probe.settle(180_000);
            endProgress();
            console.log(
              `\nwebhooks (waited ${(settled.waitedMs / 1000).toFixed(1)} s for the earlier backlog to clear; left ${settled.left.outbox + settled.left.consumer})`,
            );
            const label = (result: WebhookLatency) =>
              `${result.rate}/s: sent ${result.sent} (committed at ${Math.round(result.achievedPerSecond)}/s), commit-to-receipt p50 ${Math.round(result.p50)} ms, p99 ${Math.round(result.p99)} ms, max ${Math.round(result.max)} ms, missing ${result.missing}`;
            const latency = (result: WebhookLatency, what: string) => {
              webhooks.push({ ...result, layout });
              for (const [code, n] of Object.entries(result.errors)) unexpectedErrors.push(`${layout} webhooks ${what}: ${n} × ${code}`);
              if (result.missing) unexpectedErrors.push(`${layout} webhooks ${what}: ${result.missing} events not received within 60 s`);
              endProgress();
              console.log(`  ${what} ${label(result)}`);
            };
            // Before each drain and steady run, the notification tables are vacuumed, as pgbench
            // vacuums its own before it runs. A production Postgres has autovacuum; without it (this
            // machine's Postgres runs with autovacuum off) every earlier phase's dead delivery rows
            // stay in the claim's indexes, and a drain after the steady runs cost Postgres several times
            // the CPU per delivery of one on the fresh database (docs/decisions/deliveries-autovacuum.md).
            const vacuumNotification = async () => {
              await sql.unsafe("vacuum notification.deliveries, notification.events, notification.delivery_attempts");
            };
            // Every process's CPU over each webhook run, replicas included: what the machine had left.
            const webhookCpu = () => system.cpuSnapshot();
            for (const rate of settings.webhookRates)
              latency(await pacedLatency(hookRpc, hookFixtures, tracker, rate, settings.webhookSeconds, progress, { cpu: webhookCpu }), "");
            // The targets pause notification processes and start a second one, which only the
            // processes layout has: one process drains, then runs the steady rate alone and beside
            // a slow destination; then a second process joins for the last drain.
            if (layout === "processes") {
              const drainWith = async (processes: number, when: string) => {
                await vacuumNotification();
                const result = await drain(system, probe, hookRpc, hookFixtures, tracker!, settings.drainEvents, processes, when, progress);
                drains.push(result);
                endProgress();
                console.log(
                  `  drain (${when}): ${result.events} events in ${result.seconds.toFixed(2)} s = ${Math.round(result.perSecond)} deliveries/s by ${processes} notification process${processes > 1 ? "es" : ""} (${result.newConnections} new TLS connections to the receiver)`,
                );
                if (result.missing) unexpectedErrors.push(`drain (${processes}): ${result.missing} events not received within 120 s`);
              };
              await drainWith(1, "fresh database");
              // Half of pgbench's TPS, steady, alone and then beside a destination that answers after 2 s.
              const steadyRate = Math.max(1, Math.round((reference?.tps ?? 2_000) / 2));
              beside = await slowBeside(
                hookRpc,
                hookFixtures,
                tracker,
                receiver,
                async (url) => {
                  const created = await hookApi<{ endpoint: { endpoint_id: string } }>("POST", "/webhooks", {
                    url,
                    name: "bench slow receiver",
                    event_types: ["transaction.created"],
                  });
                  // Disabled, not deleted: its backlog ends `endpoint_disabled`.
                  return async () =>
                    void (await hookApi("PUT", "/webhooks", { endpoint_id: created.endpoint.endpoint_id, enabled: false }));
                },
                steadyRate,
                settings.webhookSteadySeconds,
                progress,
                { cpu: webhookCpu, prepare: vacuumNotification },
              );
              latency(beside.alone, "steady, alone:");
              latency(beside.beside, "steady, beside a slow destination:");
              // The second drain starts from nothing owed: the steady runs' deliveries (the slow
              // destination's end `endpoint_disabled`) must be done, or their backlog is timed too.
              await probe.settle(60_000);
              const owedUntil = Date.now() + 120_000;
              while ((await probe.pendingDeliveries()) > 0 && Date.now() < owedUntil)
                await new Promise((resolve) => setTimeout(resolve, 100));
              // One process again, then two, on the same state of the database: the steady runs left
              // tens of thousands of rows behind, which a drain on the fresh database did not meet.
              await drainWith(1, "after the steady runs");
              await system.startNotificationReplica();
              // The new process first drains a small backlog with the other, unreported: the first
              // process is warm from the steady runs (its TLS connections to the receiver open, its
              // code compiled), and a new one's handshakes and first compilations are not the drain.
              await drain(system, probe, hookRpc, hookFixtures, tracker!, Math.ceil(settings.drainEvents / 10), 2, "warm-up", progress);
              await drainWith(2, "after the steady runs");
            }
          } finally {
            hookRpc.close();
          }
        }

        // 5. Invariants, once everything owed has flowed out.
        progress("checking invariants");
        await probe.settle(60_000);
        // Fresh statistics first, as for the notification tables above (autovacuum is off here): an
        // account that grew by hundreds of thousands of rows since the last analyze is planned as
        // holding one, and the checks' joins then walk its every leg once per entity.
        await sql.unsafe("analyze ledger.entities, ledger.legs, ledger.transaction_groups, ledger.entity_balance_history");
        const accounts = [
          mainAccount.account_id,
          hookAccount.account_id,
          ...(search ? [search.accountId] : []),
          ...(accountFixtures?.accounts.map((a) => a.accountId) ?? []),
        ];
        for (const v of await moneyViolations(sql, accounts)) violations.push(`${layout}: ${v}`);
        if (tracker)
          for (const v of await deliveryViolations(sql, hookAccount.account_id, tracker, hookEndpoint)) violations.push(`${layout}: ${v}`);
        endProgress();
        notePeaks();
      } finally {
        await system.stop();
        await probe.close();
        await sql.end({ timeout: 5 });
      }
    }
    if (pgbench) closingReference = await measureReference("(closing)", false);

    const report: Report = {
      date: new Date(runStarted).toISOString(),
      smoke: settings.smoke,
      machine: machine!,
      settings: {
        warmupS: settings.warmupS,
        durationS: settings.durationS,
        concurrency: settings.concurrency,
        entities: settings.entities,
        perCellPeakRss,
        layouts: settings.layouts,
      },
      ...(pgbench ? { pgbench, pgbenchByLayout: layoutReferences } : {}),
      ...(closingReference ? { pgbenchClosing: closingReference } : {}),
      ...(Object.keys(historyReference).length ? { historyReference } : {}),
      cells,
      webhooks,
      drains,
      ...(beside ? { slowBeside: beside } : {}),
      peakRssMb: peaks,
      invariants: { ok: violations.length === 0, violations },
      unexpectedErrors,
      ok: violations.length === 0 && unexpectedErrors.length === 0,
    };
    const name = settings.smoke ? "smoke" : "latest";
    const markdown = toMarkdown(report);
    writeFileSync(join(resultsDir, `${name}.json`), toJson(report));
    writeFileSync(join(resultsDir, `${name}.md`), markdown);
    console.log(`\n${markdown}`);
    console.log(`written: bench/results/${name}.json and ${name}.md (${((Date.now() - runStarted) / 1000).toFixed(0)} s in all)`);
    return report.ok ? 0 : 1;
  } finally {
    await receiver.close();
    await admin.end({ timeout: 5 });
    rmSync(caFile, { force: true });
    rmSync(entitiesFile, { force: true });
    rmSync(h2loadDir, { recursive: true, force: true });
    rmSync(momentsFile, { force: true });
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
