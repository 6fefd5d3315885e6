// One layout's part of a bench run: the system started on a fresh database and stream, the
// closed-loop cells, the webhook runs, then the invariants.
import { createAccount } from "@ledger/ledger-service";
import { schemaClient } from "@ledger/e2e";
import type postgres from "postgres";
import { backlogProbe } from "./backlog.js";
import { rpcClients } from "./connect.js";
import { deliveryViolations, moneyViolations } from "./invariants.js";
import { LayoutRun, type RunContext } from "./layout-context.js";
import type { PgbenchResult } from "./pgbench.js";
import { endProgress, progress } from "./progress.js";
import { machineInfo } from "./report.js";
import { type Layout, startSystem } from "./system.js";
import { runWebhooks, type WebhookDeliveries } from "./webhook-runs.js";
import { runWorkloads } from "./workload-cells.js";

/** Starts the layout's system on a fresh database, runs its cells, webhooks and invariants, and stops it. */
export async function runLayout(run: RunContext, layout: Layout, reference: PgbenchResult | undefined, admin: postgres.Sql): Promise<void> {
  await admin.unsafe(`drop database if exists "${run.databaseName.replace(/"/g, '""')}" with (force)`);
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
