import { fileURLToPath } from "node:url";
import type { ConnectRouter } from "@connectrpc/connect";
import {
  authInterceptor,
  backgroundLoop,
  connectNats,
  createLogger,
  createOutbox,
  listen,
  rateLimitInterceptor,
  metricsInterceptor,
  openDatabase,
  requestIdInterceptor,
  startIdempotencySweep,
  startTracing,
  targetIsUp,
  tracingInterceptors,
  type InProcessService,
  type RunningServer,
  type Tracing,
  type Sql,
} from "@ledger/common";
import { HoldService } from "@ledger/proto/hold/v1/hold_pb.js";
import { Gauge } from "prom-client";
import { metricsRegistry } from "@ledger/common";
import type { HoldConfig } from "./config.js";
import { crashHook } from "./crash.js";
import { createHoldService } from "./hold-rpc.js";
import { createGroupCommit } from "./group-commit.js";
import { createHolds } from "./holds.js";
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
export interface HoldHandle {
  server: RunningServer;
  /** Present when tracing is configured. */
  tracing: Tracing | undefined;
  close(): Promise<void>;
}

/**
 * Starts the hold service: database, outbox relay, expiry and recovery loops, RPC server. It calls
 * the ledger at `config.ledgerUrl`, or in memory when `peers.ledger` runs in this process.
 */
export async function startHold(config: HoldConfig, peers: { ledger?: InProcessService } = {}): Promise<HoldHandle> {
  const ledgerTarget = peers.ledger ?? config.ledgerUrl;
  const log = createLogger("hold", config.logLevel);
  const tracing = await startTracing(config.tracing, "hold");
  const sql = await openDatabase({ url: config.databaseUrl, schema: "hold", migrationsDir: MIGRATIONS, max: config.databasePoolSize, log, applicationName: "hold" });
  const nats = connectNats(config, "hold", log);
  const outbox = createOutbox({ service: "hold", sql, nats, stream: { name: config.natsStream, subjectPrefix: config.natsSubjectPrefix }, log });
  outbox.start();
  const ledger = connectLedger(ledgerTarget, config.serviceToken, tracing);
  const commits = createGroupCommit({ sql, log, maxBatch: config.batchMax, maxInFlight: config.batchConcurrency, lingerMs: config.batchLingerMs });
  const holds = createHolds({ sql, commits, outbox, ledger, crash: crashHook(config.crashAt), log });

  const server = await listen({
    name: "hold",
    host: config.host,
    port: config.port,
    log,
    rpcBodyLimitBytes: config.rpcBodyLimitBytes,
    routes: (router: ConnectRouter) => router.service(HoldService, createHoldService(holds, ledger)),
    interceptors: [
      ...tracingInterceptors(tracing),
      requestIdInterceptor(log),
      metricsInterceptor(),
      // Before authentication: a caller over its budget costs no key look-up.
      rateLimitInterceptor(config),
      authInterceptor({ authenticate: ledger.authenticate }),
    ],
    readiness: {
      database: async () => (await sql`select 1`).length === 1,
      nats: () => nats.ping(),
      ledger: targetIsUp(ledgerTarget),
    },
  });

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
  const recoveryEveryMs = Math.max(1_000, Math.floor(config.recoveryAfterMs / 2));
  const loops = [
    every("hold expiry", config.expiryIntervalMs, config.expiryIntervalMs, () => holds.expireDue()),
    every("hold recovery", recoveryEveryMs, 0, () => holds.recover(config.recoveryAfterMs)),
  ];
  for (const loop of loops) loop.start();

  const stopSweep = startIdempotencySweep(sql, log);
  expiryLagSources.add(sql);
  return {
    server,
    tracing,
    async close() {
      stopSweep();
      await server.close();
      await Promise.all(loops.map((loop) => loop.stop()));
      await outbox.stop();
      await nats.close();
      await sql.end({ timeout: 5 });
      expiryLagSources.delete(sql);
      await tracing?.shutdown();
      log.info("hold stopped");
    },
  };
}
