// One layout's part of a bench run: the system started on a fresh database and stream, the
// closed-loop cells, the webhook runs, then the invariants; and what the whole run gathers.
import { createAccount, type NewAccount } from "@ledger/ledger-service";
import { schemaClient } from "@ledger/e2e";
import type { WebhookReceiver } from "@ledger/testing";
import type postgres from "postgres";
import { type AccountFixtures, createAccountFixtures, ONE_ACCOUNT_ENV } from "./account-workloads.js";
import { type BacklogProbe, backlogProbe } from "./backlog.js";
import { type Rpc, rpcClients } from "./connect.js";
import { deliveryViolations, moneyViolations } from "./invariants.js";
import type { PgbenchResult } from "./pgbench.js";
import { endProgress, progress } from "./progress.js";
import { type Cell, machineInfo, type Report } from "./report.js";
import { seedSearch } from "./search-workload.js";
import type { Settings } from "./settings.js";
import { type Layout, peakRssMb, SERVICES, type ServiceName, type System, startSystem } from "./system.js";
import { runWebhooks, type WebhookDeliveries } from "./webhook-runs.js";
import type { DrainResult, SlowBeside, WebhookLatency } from "./webhooks.js";
import { runWorkloads } from "./workload-cells.js";

/** The files the load generators read, written once for every layout and removed at the end. */
export interface RunFiles {
  /** PEM file the notification processes trust, for the HTTPS receiver. */
  caFile: string;
  /** The entities the REST cells' bodies draw from (rest-load.lua), one id a line. */
  entitiesFile: string;
  /** The h2load cells' request bodies and per-request logs. */
  h2loadDir: string;
  /** The history entity's moments, one a line, that the history workloads' REST requests draw from. */
  momentsFile: string;
}

/** What the run gathers for its report, layout by layout. */
export class RunRecord {
  readonly cells: Cell[] = [];
  readonly webhooks: WebhookLatency[] = [];
  readonly drains: DrainResult[] = [];
  beside: SlowBeside | undefined;
  readonly unexpectedErrors: string[] = [];
  readonly violations: string[] = [];
  readonly peaks: Partial<Record<Layout, Record<ServiceName, number>>> = {};
  readonly historyReference: NonNullable<Report["historyReference"]> = {};
  /** The pgbench run right before each layout after the first. */
  readonly layoutReferences: Partial<Record<Layout, PgbenchResult>> = {};
  /** False once a process's peak RSS could not be reset between cells (the peaks are then the layout's). */
  perCellPeakRss = true;
  machine: Report["machine"] | undefined;
}

/** What every layout of the run shares. */
export interface RunContext {
  settings: Settings;
  databaseUrl: string;
  natsUrl: string;
  repoRoot: string;
  receiver: WebhookReceiver;
  files: RunFiles;
  record: RunRecord;
}

/** A client of the ledger's schema, its bigints read as bigint. */
type LedgerSql = ReturnType<typeof schemaClient>;

/** The search workload's own account, seeded before its first cell. */
export interface SearchAccount {
  accountId: string;
  apiKey: string;
  rpc: Rpc;
}

/** One layout's running system, its clients and accounts, and what its cells need made once. */
export class LayoutRun {
  readonly settings: Settings;
  readonly record: RunRecord;
  /** Each service's highest RSS over the layout, in MB. */
  private readonly peak: Record<ServiceName, number>;
  private search: SearchAccount | undefined;
  private accountFixtures: AccountFixtures | undefined;
  private oneAccountLedger: string | undefined;

  constructor(
    readonly run: RunContext,
    readonly layout: Layout,
    /** The pgbench run this layout's ratios divide by. */
    readonly reference: PgbenchResult | undefined,
    readonly system: System,
    readonly sql: LedgerSql,
    readonly probe: BacklogProbe,
    readonly mainAccount: NewAccount,
    /** The webhook runs' own account, so the workloads queue no deliveries. */
    readonly hookAccount: NewAccount,
    readonly rpc: Rpc,
  ) {
    this.settings = run.settings;
    this.record = run.record;
    this.peak = Object.fromEntries(SERVICES.map((s) => [s, 0])) as Record<ServiceName, number>;
    run.record.peaks[layout] = this.peak;
  }

  /** A rate as a multiple of the reference's TPS (0 without pgbench). */
  ratioOf(perSecond: number): number {
    return this.reference ? perSecond / this.reference.tps : 0;
  }

  /** Each service's peak RSS since its last reset, folded into the layout's. */
  notePeaks(): Record<ServiceName, number> {
    const now = {} as Record<ServiceName, number>;
    for (const s of SERVICES) {
      now[s] = peakRssMb(this.system.pids[s]) ?? 0;
      this.peak[s] = Math.max(this.peak[s], now[s]);
    }
    return now;
  }

  /** Bytes of WAL the server has written so far, for the WAL each transfer costs (docs/scaling.md). */
  async walPosition(): Promise<number> {
    const [row] = await this.sql<{ b: string }[]>`select pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::text as b`;
    return Number(row?.b ?? 0);
  }

  /** The search's account, seeded before its first cell (after the money workloads, which it leaves alone). */
  async searchAccount(): Promise<SearchAccount> {
    if (this.search) return this.search;
    const account = await createAccount(this.sql as never, "bench search");
    const search = {
      accountId: account.account_id,
      apiKey: account.api_key,
      rpc: rpcClients(this.system.urls.ledger, this.system.urls.hold, account.api_key),
    };
    this.search = search;
    const groups = this.settings.searchGroups;
    progress(`search: seeding ${groups} groups with their legs`);
    const started = performance.now();
    const { entity } = await search.rpc.ledger.createEntity({ entityName: "bench search", entityType: "customer" });
    const { program } = await search.rpc.ledger.getProgram({});
    const seeded = {
      accountId: account.account_id,
      programId: account.program_id,
      externalEntityId: program!.externalEntityId,
      entityId: entity!.entityId,
    };
    await seedSearch(this.sql, seeded, groups);
    endProgress();
    console.log(`search: seeded ${groups} groups in ${((performance.now() - started) / 1000).toFixed(1)} s`);
    return search;
  }

  /** The accounts workloads' accounts, created before their first cell. */
  async accountsFixtures(): Promise<AccountFixtures> {
    this.accountFixtures ??= await createAccountFixtures(
      (name) => createAccount(this.sql as never, name),
      this.system.urls.ledger,
      this.system.urls.hold,
    );
    return this.accountFixtures;
  }

  /** The ledger an accounts workload calls: the system's, or for accounts-one a second process with one account per transaction. */
  async accountsLedger(workload: string): Promise<string> {
    await this.accountsFixtures();
    if (workload === "accounts") return this.system.urls.ledger;
    this.oneAccountLedger ??= (await this.system.startLedgerReplica(ONE_ACCOUNT_ENV)).url;
    return this.oneAccountLedger;
  }

  /** Every account the layout's transfers moved money in: the invariants' scope. */
  accountIds(): string[] {
    return [
      this.mainAccount.account_id,
      this.hookAccount.account_id,
      ...(this.search ? [this.search.accountId] : []),
      ...(this.accountFixtures?.accounts.map((a) => a.accountId) ?? []),
    ];
  }

  /** Closes the money workloads' clients, once their cells are done. */
  closeClients(): void {
    this.rpc.close();
    this.search?.rpc.close();
  }
}

/** Starts the layout's system on a fresh database, runs its cells, webhooks and invariants, and stops it. */
export async function runLayout(run: RunContext, layout: Layout, reference: PgbenchResult | undefined, admin: postgres.Sql): Promise<void> {
  const databaseName = decodeURIComponent(new URL(run.databaseUrl).pathname.slice(1));
  await admin.unsafe(`drop database if exists "${databaseName.replace(/"/g, '""')}" with (force)`);
  progress(
    layout === "processes"
      ? "starting ledger, hold, notification and gateway as four processes"
      : "starting everything in one process (dist/start-all.js)",
  );
  const { databaseUrl, natsUrl, repoRoot } = run;
  const system = await startSystem({ databaseUrl, natsUrl, repoRoot, caFile: run.files.caFile, layout });
  endProgress();
  console.log(`\n${layout}: system up (logs in ${system.logDir})`);
  const sql = schemaClient(databaseUrl, "ledger", 4);
  const probe = await backlogProbe(sql as unknown as postgres.Sql, natsUrl, system.stream);
  try {
    const [versionRow] = await sql<{ v: string }[]>`select split_part(version(), ' on ', 1) as v`;
    run.record.machine ??= machineInfo(versionRow?.v ?? "unknown", probe.natsVersion());
    // createAccount takes the ledger's own Sql type; this client is the same postgres.js client.
    const mainAccount = await createAccount(sql as never, "bench");
    const hookAccount = await createAccount(sql as never, "bench webhooks");
    const rpc = rpcClients(system.urls.ledger, system.urls.hold, mainAccount.api_key);
    const layoutRun = new LayoutRun(run, layout, reference, system, sql, probe, mainAccount, hookAccount, rpc);
    if (run.settings.workloads.length) await runWorkloads(layoutRun);
    layoutRun.closeClients();
    const deliveries = run.settings.webhooks ? await runWebhooks(layoutRun) : undefined;
    await checkInvariants(layoutRun, deliveries);
  } finally {
    await system.stop();
    await probe.close();
    await sql.end({ timeout: 5 });
  }
}

/** The money and delivery invariants, once everything owed has flowed out; then the layout's last peaks. */
async function checkInvariants(layout: LayoutRun, deliveries: WebhookDeliveries | undefined): Promise<void> {
  const { sql, record } = layout;
  progress("checking invariants");
  await layout.probe.settle(60_000);
  // Fresh statistics first, as for the notification tables before the webhook runs (autovacuum is
  // off here): an account that grew by hundreds of thousands of rows since the last analyze is
  // planned as holding one, and the checks' joins then walk its every leg once per entity.
  await sql.unsafe("analyze ledger.entities, ledger.legs, ledger.transaction_groups, ledger.entity_balance_history");
  for (const v of await moneyViolations(sql, layout.accountIds())) record.violations.push(`${layout.layout}: ${v}`);
  if (deliveries) {
    const found = await deliveryViolations(sql, layout.hookAccount.account_id, deliveries.tracker, deliveries.endpointId);
    for (const v of found) record.violations.push(`${layout.layout}: ${v}`);
  }
  endProgress();
  layout.notePeaks();
}
