import { fileURLToPath } from "node:url";
import type { ConnectRouter } from "@connectrpc/connect";
import {
  backgroundLoop,
  metricsRegistry,
  startService,
  targetIsUp,
  type InProcessService,
  type ServiceHandle,
  type Sql,
} from "@ledger/common";
import { HoldService } from "@ledger/proto/hold/v1/hold_pb.js";
import { Gauge } from "prom-client";
import type { HoldConfig } from "./config.js";
import { crashHook } from "./crash.js";
import { createHoldService } from "./hold-rpc.js";
import { createGroupCommit } from "./group-commit.js";
import { createHolds } from "./holds.js";
import { createLedgerBatch } from "./ledger-batch.js";
import { connectLedger } from "./ledger-client.js";

const MIGRATIONS = fileURLToPath(new URL("../migrations", import.meta.url));

const expiryLagSources = new Set<Sql>();
new Gauge({
  name: "hold_expiry_lag_seconds",
  help: "How far past expires_at the oldest still-active hold is; stays near zero when expiry keeps up.",
  registers: [metricsRegistry],
  async collect() {
    let lag = 0;
    for (const sql of expiryLagSources) {
      const [row] = await sql<{ lag: number | null }[]>`
        select extract(epoch from now() - min(expires_at))::float8 as lag from holds
        where status in ('held', 'partially_captured') and expires_at <= now()`.catch(() => [{ lag: null }]);
      lag = Math.max(lag, row?.lag ?? 0);
    }
    this.set(lag);
  },
});

/** A running hold service. */
export type HoldHandle = ServiceHandle;

/**
 * Starts the hold service: what every service has (startService), its outbox, group commit, the
 * expiry and recovery loops and its RPC handlers. It calls the ledger at `config.ledgerUrl`, or in
 * memory when `peers.ledger` runs in this process.
 */
export function startHold(config: HoldConfig, peers: { ledger?: InProcessService } = {}): Promise<HoldHandle> {
  const ledgerTarget = peers.ledger ?? config.ledgerUrl;
  return startService({
    name: "hold",
    config,
    migrationsDir: MIGRATIONS,
    parts({ sql, log, tracing, lifecycle, openOutbox }) {
      const outbox = openOutbox();
      const ledger = connectLedger(ledgerTarget, config.serviceToken, tracing);
      const commits = createGroupCommit({
        sql,
        log,
        maxBatch: config.batchMax,
        maxInFlight: config.batchConcurrency,
        lingerMs: config.batchLingerMs,
      });
      // The ledger calls are grouped like the transactions: the same settings bound both.
      const reservations = createLedgerBatch({
        ledger,
        log,
        maxBatch: config.batchMax,
        maxInFlight: config.batchConcurrency,
        lingerMs: config.batchLingerMs,
      });
      const holds = createHolds({ sql, commits, outbox, reservations, crash: crashHook(config.crashAt), log });

      // Expiry and recovery run in every replica; row locks and conditional updates keep them from
      // doing one hold's work twice. Recovery runs at once at start (a crash may have left intents).
      const every = (name: string, everyMs: number, firstDelayMs: number, work: () => Promise<unknown>) =>
        backgroundLoop({
          name,
          log,
          iteration: async () => {
            await work();
            return false;
          },
          idleMs: everyMs,
          backoff: { firstMs: everyMs, maxMs: Math.max(everyMs, 5_000) },
          firstDelayMs,
        });
      lifecycle.run(
        "hold expiry",
        every("hold expiry", config.expiryIntervalMs, config.expiryIntervalMs, () => holds.expireDue()),
      );
      const recoveryEveryMs = Math.max(1_000, Math.floor(config.recoveryAfterMs / 2));
      lifecycle.run(
        "hold recovery",
        every("hold recovery", recoveryEveryMs, 0, () => holds.recover(config.recoveryAfterMs)),
      );
      expiryLagSources.add(sql);
      lifecycle.onClose("expiry lag gauge", () => expiryLagSources.delete(sql));

      return {
        routes: (router: ConnectRouter) => router.service(HoldService, createHoldService(holds, ledger)),
        auth: { authenticate: ledger.authenticate },
        readiness: { ledger: targetIsUp(ledgerTarget) },
      };
    },
  });
}
