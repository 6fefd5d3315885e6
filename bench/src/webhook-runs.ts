// One layout's webhook runs, in an account of their own so the workloads queue no deliveries: the
// paced latency runs, and in the processes layout the drains and the steady runs beside a slow
// destination.
import { REQUEST_TIMEOUT_MS, type Rpc, rpcClients } from "./connect.js";
import type { LayoutRun } from "./layout-context.js";
import { endProgress, progress } from "./progress.js";
import { DeliveryTracker, drain, HOOK_PATH, pacedLatency, slowBeside, type WebhookLatency } from "./webhooks.js";
import { createFixtures, type Fixtures } from "./workloads.js";

/** JSON calls of the gateway for one API key, through node's fetch: the webhook destinations' set-up. */
type GatewayJson = <T>(method: string, path: string, body: unknown) => Promise<T>;

function gatewayJson(restUrl: string, apiKey: string): GatewayJson {
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

/** What the webhook runs of one layout share. */
interface HookRuns {
  layout: LayoutRun;
  tracker: DeliveryTracker;
  api: GatewayJson;
  rpc: Rpc;
  fixtures: Fixtures;
}

/** The deliveries the layout's webhook runs expect, for the invariants. */
export interface WebhookDeliveries {
  tracker: DeliveryTracker;
  endpointId: string;
}

/** Runs the layout's webhook runs, recording each; answers what the invariants check the deliveries against. */
export async function runWebhooks(layout: LayoutRun): Promise<WebhookDeliveries> {
  const { system, hookAccount, probe } = layout;
  const tracker = new DeliveryTracker(layout.run.receiver);
  const api = gatewayJson(system.restUrl, hookAccount.api_key);
  const rpc = rpcClients(system.urls.ledger, system.urls.hold, hookAccount.api_key);
  try {
    const hook = await api<{ endpoint: { endpoint_id: string } }>("POST", "/webhooks", {
      url: layout.run.receiver.endpoint(HOOK_PATH),
      name: `bench receiver (${layout.layout})`,
    });
    const fixtures = await createFixtures(rpc, 50);
    progress("webhooks: waiting for the workloads' events to be consumed first");
    const settled = await probe.settle(180_000);
    endProgress();
    console.log(
      `\nwebhooks (waited ${(settled.waitedMs / 1000).toFixed(1)} s for the earlier backlog to clear; left ${settled.left.outbox + settled.left.consumer})`,
    );
    const runs: HookRuns = { layout, tracker, api, rpc, fixtures };
    const { settings } = layout;
    for (const rate of settings.webhookRates) {
      // Every process's CPU over each webhook run, replicas included: what the machine had left.
      const result = await pacedLatency(rpc, fixtures, tracker, rate, settings.webhookSeconds, progress, {
        cpu: () => system.cpuSnapshot(),
      });
      recordLatency(layout, result, "");
    }
    // The targets pause notification processes and start a second one, which only the processes layout has.
    if (layout.layout === "processes") await runWebhookTargets(runs);
    return { tracker, endpointId: hook.endpoint.endpoint_id };
  } finally {
    rpc.close();
  }
}

/** Records one latency run, and its failures and missing deliveries as unexpected errors. */
function recordLatency(layout: LayoutRun, result: WebhookLatency, what: string): void {
  const { record } = layout;
  record.webhooks.push({ ...result, layout: layout.layout });
  for (const [code, n] of Object.entries(result.errors)) record.unexpectedErrors.push(`${layout.layout} webhooks ${what}: ${n} × ${code}`);
  if (result.missing) record.unexpectedErrors.push(`${layout.layout} webhooks ${what}: ${result.missing} events not received within 60 s`);
  endProgress();
  console.log(
    `  ${what} ${result.rate}/s: sent ${result.sent} (committed at ${Math.round(result.achievedPerSecond)}/s), commit-to-receipt p50 ${Math.round(result.p50)} ms, p99 ${Math.round(result.p99)} ms, max ${Math.round(result.max)} ms, missing ${result.missing}`,
  );
}

/**
 * Vacuums the notification tables, as pgbench vacuums its own before it runs. A production Postgres
 * has autovacuum; without it (this machine's Postgres runs with autovacuum off) every earlier
 * phase's dead delivery rows stay in the claim's indexes, and a drain after the steady runs cost
 * Postgres several times the CPU per delivery of one on the fresh database
 * (docs/decisions/deliveries-autovacuum.md).
 */
async function vacuumNotification(layout: LayoutRun): Promise<void> {
  await layout.sql.unsafe("vacuum notification.deliveries, notification.events, notification.delivery_attempts");
}

/** Builds a backlog with `processes` notification processes paused, then times its drain; records it. */
async function drainWith(runs: HookRuns, processes: number, when: string): Promise<void> {
  const { layout } = runs;
  await vacuumNotification(layout);
  const events = layout.settings.drainEvents;
  const result = await drain(layout.system, layout.probe, runs.rpc, runs.fixtures, runs.tracker, events, processes, when, progress);
  layout.record.drains.push(result);
  endProgress();
  console.log(
    `  drain (${when}): ${result.events} events in ${result.seconds.toFixed(2)} s = ${Math.round(result.perSecond)} deliveries/s by ${processes} notification process${processes > 1 ? "es" : ""} (${result.newConnections} new TLS connections to the receiver)`,
  );
  if (result.missing) layout.record.unexpectedErrors.push(`drain (${processes}): ${result.missing} events not received within 120 s`);
}

/**
 * The processes layout's webhook targets: one process drains, then runs the steady rate alone and
 * beside a slow destination; then a second process joins for the last drain.
 */
async function runWebhookTargets(runs: HookRuns): Promise<void> {
  const { layout, api } = runs;
  const { settings, system, probe } = layout;
  await drainWith(runs, 1, "fresh database");
  // Half of pgbench's TPS, steady, alone and then beside a destination that answers after 2 s.
  const steadyRate = Math.max(1, Math.round((layout.reference?.tps ?? 2_000) / 2));
  const addSlow = async (url: string) => {
    const created = await api<{ endpoint: { endpoint_id: string } }>("POST", "/webhooks", {
      url,
      name: "bench slow receiver",
      event_types: ["transaction.created"],
    });
    // Disabled, not deleted: its backlog ends `endpoint_disabled`.
    return async () => void (await api("PUT", "/webhooks", { endpoint_id: created.endpoint.endpoint_id, enabled: false }));
  };
  const beside = await slowBeside(
    runs.rpc,
    runs.fixtures,
    runs.tracker,
    layout.run.receiver,
    addSlow,
    steadyRate,
    settings.webhookSteadySeconds,
    progress,
    { cpu: () => system.cpuSnapshot(), prepare: () => vacuumNotification(layout) },
  );
  layout.record.beside = beside;
  recordLatency(layout, beside.alone, "steady, alone:");
  recordLatency(layout, beside.beside, "steady, beside a slow destination:");
  // The second drain starts from nothing owed: the steady runs' deliveries (the slow
  // destination's end `endpoint_disabled`) must be done, or their backlog is timed too.
  await probe.settle(60_000);
  const owedUntil = Date.now() + 120_000;
  while ((await probe.pendingDeliveries()) > 0 && Date.now() < owedUntil) await new Promise((resolve) => setTimeout(resolve, 100));
  // One process again, then two, on the same state of the database: the steady runs left
  // tens of thousands of rows behind, which a drain on the fresh database did not meet.
  await drainWith(runs, 1, "after the steady runs");
  await system.startNotificationReplica();
  // The new process first drains a small backlog with the other, unreported: the first
  // process is warm from the steady runs (its TLS connections to the receiver open, its
  // code compiled), and a new one's handshakes and first compilations are not the drain.
  const warmupEvents = Math.ceil(settings.drainEvents / 10);
  await drain(system, probe, runs.rpc, runs.fixtures, runs.tracker, warmupEvents, 2, "warm-up", progress);
  await drainWith(runs, 2, "after the steady runs");
}
