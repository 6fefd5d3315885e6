import { fileURLToPath } from "node:url";
import {
  authInterceptor,
  ledgerAuthenticator,
  cachedAuthenticator,
  connectNats,
  createLogger,
  listen,
  rateLimitInterceptor,
  startIdempotencySweep,
  metricsInterceptor,
  openDatabase,
  requestIdInterceptor,
  startTracing,
  tracingInterceptors,
  type InProcessService,
  type RunningServer,
  type Tracing,
} from "@ledger/common";
import type { NotificationConfig } from "./config.js";
import { createEventConsumer } from "./consumer.js";

import routes from "./routes.js";
import { createWorker } from "./worker.js";

const MIGRATIONS = fileURLToPath(new URL("../migrations", import.meta.url));

/** `User-Agent` of deliveries (docs/webhooks.md#a-delivery). */
export const USER_AGENT = "ledger-webhooks/0.1.0";

/** A running notification service. */
export interface NotificationHandle {
  server: RunningServer;
  /** Present when tracing is configured. */
  tracing: Tracing | undefined;
  /** Looks for due deliveries now (tests and resends use it; workers also poll). */
  wake(): void;
  /** SIGTERM path: stop accepting, stop consuming, finish attempts in flight, close connections. */
  close(): Promise<void>;
}

/**
 * Starts the notification service: database and migrations, the RPC server, the JetStream
 * consumer and the delivery workers. It does not wait for NATS: events are read once it is there.
 * API keys are checked by the ledger at `config.ledgerUrl`, or in memory when `peers.ledger` runs
 * in this process.
 */
export async function startNotification(config: NotificationConfig, peers: { ledger?: InProcessService } = {}): Promise<NotificationHandle> {
  const log = createLogger("notification", config.logLevel);
  const tracing = await startTracing(config.tracing, "notification");
  const sql = await openDatabase({
    url: config.databaseUrl,
    schema: "notification",
    migrationsDir: MIGRATIONS,
    max: config.databasePoolSize,
    log,
    applicationName: "notification",
  });

  const worker = createWorker({
    sql,
    log,
    secretKey: config.secretKey,
    timeoutMs: config.webhookTimeoutMs,
    retryScheduleMs: config.webhookRetryScheduleMs,
    concurrency: config.webhookConcurrency,
    allowPrivateNetworks: config.webhookAllowPrivateNetworks,
    userAgent: USER_AGENT,
    tracing,
    ...(config.webhookExtraCa ? { extraCa: config.webhookExtraCa } : {}),
  });
  worker.start();

  const nats = connectNats(config, "notification", log);
  const consumer = createEventConsumer({
    sql,
    nats,
    stream: { name: config.natsStream, subjectPrefix: config.natsSubjectPrefix },
    log,
    onIngested: () => worker.wake(),
    tracing,
  });
  consumer.start();

  const auth = cachedAuthenticator(ledgerAuthenticator(peers.ledger ?? config.ledgerUrl, config.serviceToken));
  const server = await listen({
    name: "notification",
    host: config.host,
    port: config.port,
    log,
    rpcBodyLimitBytes: config.rpcBodyLimitBytes,
    routes: routes({
      sql,
      secretKey: config.secretKey,
      urlPolicy: { allowHttp: config.webhookAllowHttp, allowPrivateNetworks: config.webhookAllowPrivateNetworks },
      wake: () => worker.wake(),
    }),
    interceptors: [
      ...tracingInterceptors(tracing),
      requestIdInterceptor(log),
      metricsInterceptor(),
      // Before authentication: a caller over its budget costs no key look-up.
      rateLimitInterceptor(config),
      authInterceptor({ authenticate: auth }),
    ],
    readiness: {
      database: async () => (await sql`select 1`).length === 1,
      nats: () => nats.ping(),
    },
  });

  const stopSweep = startIdempotencySweep(sql, log);

  return {
    server,
    tracing,
    wake: () => worker.wake(),
    async close() {
      stopSweep();
      await server.close();
      await consumer.stop();
      await worker.stop();
      await nats.close();
      await sql.end({ timeout: 5 });
      await tracing?.shutdown();
      log.info("notification stopped");
    },
  };
}
