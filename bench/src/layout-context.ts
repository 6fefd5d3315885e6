// What one layout's cells and webhook runs work with (its system, clients and accounts), and what
// the whole run gathers for its report.
import { createAccount, type NewAccount } from "@ledger/ledger-service";
import type { schemaClient } from "@ledger/e2e";
import type { WebhookReceiver } from "@ledger/testing";
import { type AccountFixtures, createAccountFixtures, ONE_ACCOUNT_ENV } from "./account-workloads.js";
import type { BacklogProbe } from "./backlog.js";
import { type Rpc, rpcClients } from "./connect.js";
import type { PgbenchResult } from "./pgbench.js";
import { endProgress, progress } from "./progress.js";
import type { Cell, Report } from "./report.js";
import { seedSearch } from "./search-workload.js";
import type { Settings } from "./settings.js";
import { type Layout, peakRssMb, SERVICES, type ServiceName, type System } from "./system.js";
import type { DrainResult, SlowBeside, WebhookLatency } from "./webhooks.js";

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
  /** The database's name, which each layout drops and recreates. */
  databaseName: string;
  natsUrl: string;
  repoRoot: string;
  receiver: WebhookReceiver;
  files: RunFiles;
  record: RunRecord;
}

/** A client of the ledger's schema, its bigints read as bigint. */
export type LedgerSql = ReturnType<typeof schemaClient>;

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
