// The closed-loop cells of one layout: each workload, over each transport, at each concurrency,
// with a warm-up before the measured window and the CPU, WAL, RSS and backlog read around it.
import { writeFileSync } from "node:fs";
import { accountsOperation, isAccountWorkload } from "./account-workloads.js";
import { BATCH_CONCURRENCY, BATCH_ITEMS, isBatchWorkload, rpcBatchOperation } from "./batch-workloads.js";
import { type LoopResult, runClosedLoop } from "./closed-loop.js";
import { H2LOAD_WORKLOADS, type H2loadOptions, runH2load } from "./h2load.js";
import { runHistoryReference } from "./history-reference.js";
import { HISTORY_CONCURRENCY, type HistoryFixture, isHistoryWorkload, rpcHistoryOperation, seedHistory } from "./history-workloads.js";
import type { LayoutRun, SearchAccount } from "./layout-context.js";
import { endProgress, progress } from "./progress.js";
import { type Cell, cellsTable, historyReferenceText } from "./report.js";
import { isSearchWorkload, rpcSearchOperation, SEARCH_CONCURRENCY, SEARCH_VALUES } from "./search-workload.js";
import type { Settings } from "./settings.js";
import { type CpuSource, cpuPercent, resetPeakRss, SERVICES } from "./system.js";
import { createFixtures, type Fixtures, rpcOperation, type Transport, type WorkloadName } from "./workloads.js";
import { runWrk } from "./wrk.js";

type Workload = Settings["workloads"][number];

/** What one cell runs against: the workload's fixtures and, where it has one, its own account or ledger. */
interface CellSubject {
  workload: Workload;
  transport: Transport;
  concurrency: number;
  fixtures: Fixtures;
  history: HistoryFixture | undefined;
  searching: SearchAccount | undefined;
  accounts: ReturnType<typeof accountsOperation> | undefined;
}

/** A measured window: the load generator's result, the CPU over it, and where the WAL stood as it began. */
interface Measured {
  result: LoopResult;
  cpu: Record<CpuSource, number>;
  walStart: number | undefined;
}

/** Creates and funds the entities, then runs every cell of every workload in turn, printing each as it ends. */
export async function runWorkloads(layout: LayoutRun): Promise<void> {
  const { settings } = layout;
  progress(`creating and funding ${settings.entities} entities`);
  const fixtures = await createFixtures(layout.rpc, settings.entities);
  writeFileSync(layout.run.files.entitiesFile, `${fixtures.entities.join("\n")}\n`);
  endProgress();
  console.log(`\n${cellsTable([]).split("\n").join("\n")}`);
  let history: HistoryFixture | undefined;
  for (const workload of settings.workloads) {
    if (isHistoryWorkload(workload) && !history) history = await prepareHistory(layout, fixtures);
    for (const transport of settings.transports) {
      if (transport === "h2load" && !H2LOAD_WORKLOADS.includes(workload)) continue;
      // The accounts pair compares two ledger processes side by side: over RPC, with processes apart.
      if (isAccountWorkload(workload) && (transport !== "rpc" || layout.layout !== "processes")) continue;
      const accountsUrl = isAccountWorkload(workload) ? await layout.accountsLedger(workload) : undefined;
      const accounts = accountsUrl ? accountsOperation(await layout.accountsFixtures(), accountsUrl, layout.system.urls.hold) : undefined;
      const searching = isSearchWorkload(workload) ? await layout.searchAccount() : undefined;
      for (const concurrency of cellLevels(settings, workload)) {
        await runCell(layout, { workload, transport, concurrency, fixtures, history, searching, accounts });
      }
    }
  }
}

/**
 * The concurrencies a workload runs at. A batch call is 100 transfers: its cells are concurrency
 * 1, 4 and 16 (4 in a smoke run). A history read is measured for one reader, as is a search.
 */
function cellLevels(settings: Settings, workload: Workload): readonly number[] {
  if (isBatchWorkload(workload)) return settings.smoke ? [4] : BATCH_CONCURRENCY;
  if (isHistoryWorkload(workload)) return HISTORY_CONCURRENCY;
  if (isSearchWorkload(workload)) return SEARCH_CONCURRENCY;
  return settings.concurrency;
}

/** Seeds the history workloads' entity, then measures the same reads as SQL alone, before the ledger's cells. */
async function prepareHistory(layout: LayoutRun, fixtures: Fixtures): Promise<HistoryFixture> {
  const { settings, sql } = layout;
  progress(`seeding an entity with ${settings.historyLegs} posted legs for the history reads`);
  const history = await seedHistory(layout.rpc, fixtures, settings.historyLegs);
  writeFileSync(layout.run.files.momentsFile, `${history.moments.join("\n")}\n`);
  // Its events flow out before the reads are measured, as the webhook runs wait for theirs.
  await layout.probe.settle(180_000);
  endProgress();
  console.log(`history entity: ${history.moments.length} posted legs at ${new Set(history.moments).size} distinct moments`);
  // The same reads as SQL alone, on the same database and now, before the ledger's cells.
  const referenceSeconds = settings.smoke ? 1 : Math.max(5, Math.round(settings.durationS));
  const workloads = settings.workloads.filter(isHistoryWorkload);
  progress(`history reference: ${workloads.join(" and ")} as SQL alone through pgbench at c=1, ${referenceSeconds} s each`);
  const [entity] = await sql<{ account_id: string; program_id: string }[]>`
    select account_id, program_id from entities where id = ${history.entityId}`;
  const reference = await runHistoryReference({
    databaseUrl: layout.run.databaseUrl,
    entity: { entityId: history.entityId, accountId: entity!.account_id, programId: entity!.program_id },
    moments: history.moments,
    workloads,
    seconds: referenceSeconds,
  });
  layout.record.historyReference[layout.layout] = reference;
  endProgress();
  console.log(`history reference (the same SQL alone through pgbench, c=1): ${historyReferenceText(reference)}`);
  return history;
}

/** One cell: waits for the previous cell's events, measures, waits for its own, and records it. */
async function runCell(layout: LayoutRun, subject: CellSubject): Promise<void> {
  const { settings, system, probe, record } = layout;
  const { workload, transport, concurrency } = subject;
  const label = `${workload} ${transport} c=${concurrency}`;
  const settled = await probe.settle(settings.settleMs);
  if (settled.waitedMs > 1_000) progress(`${label}: waited ${(settled.waitedMs / 1000).toFixed(1)} s for the previous events to flow out`);
  for (const s of SERVICES) if (!resetPeakRss(system.pids[s])) record.perCellPeakRss = false;
  const storedBefore = await probe.storedEvents();
  const cellStarted = performance.now();
  const measure = transport === "h2load" ? measureH2load : transport === "rest" ? measureWrk : measureRpc;
  const { result, cpu, walStart } = await measure(layout, subject, label);
  const walEnd = await layout.walPosition();
  const left = await probe.read();
  // Throughput of a batch workload is in transfers (items), latencies are per call.
  const itemsPerCall = isBatchWorkload(workload) ? BATCH_ITEMS : 1;
  const storedDuring = (await probe.storedEvents()) - storedBefore;
  const cellSeconds = (performance.now() - cellStarted) / 1000;
  // The cell's own backlog, waited for here rather than before the next cell, so its time is this cell's.
  const drained = await probe.settle(settings.settleMs);
  const cell: Cell = {
    layout: layout.layout,
    workload,
    transport,
    concurrency,
    ...result,
    itemsPerCall,
    ratio: layout.ratioOf(result.perSecond),
    walBytesPerUnit:
      walStart === undefined || result.perSecond === 0 ? undefined : (walEnd - walStart) / (result.perSecond * settings.durationS),
    rssMb: layout.notePeaks(),
    cpu,
    backlogAfter: left.outbox + left.consumer,
    eventsStoredPerSecond: storedDuring / cellSeconds,
    drainedMs: drained.waitedMs,
  };
  record.cells.push(cell);
  subject.accounts?.close();
  for (const [code, n] of Object.entries(result.errors)) record.unexpectedErrors.push(`${layout.layout} ${label}: ${n} × ${code}`);
  endProgress();
  console.log(cellsTable([cell]).split("\n")[2]);
}

/** h2load, twice, as wrk below: the warm-up, then the measured window. */
async function measureH2load(layout: LayoutRun, subject: CellSubject, label: string): Promise<Measured> {
  const { settings, system } = layout;
  const h2loadRun = (seconds: number) =>
    runH2load({
      ledgerUrl: system.urls.ledger,
      apiKey: layout.mainAccount.api_key,
      workload: subject.workload as H2loadOptions["workload"],
      concurrency: subject.concurrency,
      seconds,
      fixtures: subject.fixtures,
      ...(subject.history ? { history: subject.history } : {}),
      dir: layout.run.files.h2loadDir,
    });
  progress(`${label}: h2load, ${settings.warmupS + settings.durationS} s`);
  const { run, errors, cpu, walStart } = await warmThenMeasure(layout, h2loadRun, () => settings.durationS);
  return { result: { ...run, errors }, cpu, walStart };
}

/** wrk, twice: the warm-up, then the measured window with the CPU read around it. */
async function measureWrk(layout: LayoutRun, subject: CellSubject, label: string): Promise<Measured> {
  const { settings, system } = layout;
  const historyRead = isHistoryWorkload(subject.workload);
  const { searching } = subject;
  const wrkRun = (seconds: number) =>
    runWrk({
      restUrl: system.restUrl,
      apiKey: searching?.apiKey ?? layout.mainAccount.api_key,
      workload: subject.workload,
      concurrency: subject.concurrency,
      seconds,
      entitiesFile: historyRead ? layout.run.files.momentsFile : layout.run.files.entitiesFile,
      hot: historyRead ? subject.history!.entityId : subject.fixtures.hot,
      ...(searching ? { searchValues: SEARCH_VALUES } : {}),
    });
  progress(`${label}: wrk, ${settings.warmupS + settings.durationS} s`);
  const { run, errors, cpu, walStart } = await warmThenMeasure(layout, wrkRun, (window) => window.seconds);
  const result = {
    ok: run.ok,
    perSecond: run.units / run.seconds,
    p50: run.p50,
    p95: run.p95,
    p99: run.p99,
    max: run.max,
    errors,
  };
  return { result, cpu, walStart };
}

/**
 * Runs an external load generator twice: the warm-up, then the measured window with the CPU and the
 * WAL read around it. The generator's CPU, from its own clock over `seconds(window)`, joins the
 * bench's; the errors are both runs'.
 */
async function warmThenMeasure<R extends { cpuSeconds: number; errors: Record<string, number> }>(
  layout: LayoutRun,
  runFor: (seconds: number) => Promise<R>,
  seconds: (window: R) => number,
): Promise<{ run: R; errors: Record<string, number>; cpu: Record<CpuSource, number>; walStart: number }> {
  const { settings, system } = layout;
  const warmup = await runFor(settings.warmupS);
  const walStart = await layout.walPosition();
  const windowCpu = system.cpuSnapshot();
  const run = await runFor(settings.durationS);
  const cpu = cpuPercent(windowCpu, system.cpuSnapshot());
  cpu.bench += Math.round((run.cpuSeconds / seconds(run)) * 100);
  return { run, errors: addErrors(addErrors({}, warmup.errors), run.errors), cpu, walStart };
}

/** Connect's client in a closed loop, in this process; the CPU and WAL are read as its warm-up ends. */
async function measureRpc(layout: LayoutRun, subject: CellSubject, label: string): Promise<Measured> {
  const { settings, system } = layout;
  let walStart: number | undefined;
  let windowCpu = system.cpuSnapshot();
  const cpuTimer = setTimeout(() => {
    windowCpu = system.cpuSnapshot();
    layout.walPosition().then(
      (at) => (walStart = at),
      () => {},
    );
  }, settings.warmupS * 1000);
  const total = settings.warmupS + settings.durationS;
  const result = await runClosedLoop({
    concurrency: subject.concurrency,
    warmupMs: settings.warmupS * 1000,
    durationMs: settings.durationS * 1000,
    operation: rpcOperationOf(layout, subject),
    onProgress: (ms, ok, failed) => progress(`${label}: ${(ms / 1000).toFixed(0)}/${total} s, ${ok} ok in window, ${failed} errors`),
  });
  clearTimeout(cpuTimer);
  return { result, cpu: cpuPercent(windowCpu, system.cpuSnapshot()), walStart };
}

/** The RPC call one closed-loop worker makes, for the cell's workload. */
function rpcOperationOf(layout: LayoutRun, subject: CellSubject) {
  const { workload, fixtures } = subject;
  if (subject.accounts) return subject.accounts.operation;
  if (subject.searching) return rpcSearchOperation(subject.searching.rpc);
  if (isBatchWorkload(workload)) return rpcBatchOperation(workload, layout.rpc, fixtures);
  if (isHistoryWorkload(workload)) return rpcHistoryOperation(workload, layout.rpc, subject.history!);
  return rpcOperation(workload as WorkloadName, layout.rpc, fixtures);
}

/** Failures of two runs together (a cell's warm-up and its window). */
function addErrors(into: Record<string, number>, more: Record<string, number>): Record<string, number> {
  for (const [code, n] of Object.entries(more)) into[code] = (into[code] ?? 0) + n;
  return into;
}
