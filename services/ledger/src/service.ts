import { fileURLToPath } from "node:url";
import {
  authInterceptor,
  cachedAuthenticator,
  connectNats,
  createLogger,
  createOutbox,
  listen,
  startIdempotencySweep,
  metricsInterceptor,
  openDatabase,
  requestIdInterceptor,
  startTracing,
  tracingInterceptors,
  type RunningServer,
  type Tracing,
} from "@ledger/common";
import type { LedgerConfig } from "./config.js";
import { authenticate, ensureDevAccount, principalOfAccount } from "./identity.js";
import { createProgramResolver } from "./programs.js";
import { createBatcher } from "./batcher.js";
import routes, { PUBLIC_METHODS } from "./routes.js";

const MIGRATIONS = fileURLToPath(new URL("../migrations", import.meta.url));

/** A running ledger service. */
export interface LedgerHandle {
  server: RunningServer;
  /** Present when tracing is configured. */
  tracing: Tracing | undefined;
  /** SIGTERM path: stop accepting, finish in-flight calls, flush the outbox, close connections. */
  close(): Promise<void>;
}

/** Starts the ledger: database and migrations, the outbox relay, and the RPC server. */
export async function startLedger(config: LedgerConfig): Promise<LedgerHandle> {
  const log = createLogger("ledger", config.logLevel);
  const tracing = await startTracing(config.tracing, "ledger");
  const sql = await openDatabase({
    url: config.databaseUrl,
    schema: "ledger",
    migrationsDir: MIGRATIONS,
    max: config.databasePoolSize,
    log,
    applicationName: "ledger",
  });
  if (config.devApiKey) await ensureDevAccount(sql, config.devApiKey);

  const nats = connectNats(config.natsUrl, "ledger", log);
  const outbox = createOutbox({
    service: "ledger",
    sql,
    nats,
    stream: { name: config.natsStream, subjectPrefix: config.natsSubjectPrefix },
    log,
  });
  outbox.start();

  const auth = cachedAuthenticator((key) => authenticate(sql, key));
  const server = await listen({
    name: "ledger",
    host: config.host,
    port: config.port,
    log,
    routes: routes({
      sql,
      outbox,
      batcher: createBatcher({ sql, outbox, log, maxBatch: config.batchMax, maxInFlight: config.batchConcurrency, lingerMs: config.batchLingerMs }),
      authenticate: auth,
      resolveProgram: createProgramResolver(sql),
    }),
    interceptors: [
      ...tracingInterceptors(tracing),
      requestIdInterceptor(log),
      metricsInterceptor(),
      authInterceptor({
        authenticate: auth,
        publicMethods: PUBLIC_METHODS,
        service: { token: config.serviceToken, resolveAccount: (accountId) => principalOfAccount(sql, accountId) },
      }),
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
    async close() {
      stopSweep();
      await server.close();
      await outbox.stop();
      await nats.close();
      await sql.end({ timeout: 5 });
      await tracing?.shutdown();
      log.info("ledger stopped");
    },
  };
}
