import { fileURLToPath } from "node:url";
import {
  authInterceptor,
  cachedAuthenticator,
  connectNats,
  createLogger,
  createOutbox,
  eventSubject,
  listen,
  rateLimitInterceptor,
  startIdempotencySweep,
  metricsInterceptor,
  openDatabase,
  requestIdInterceptor,
  startTracing,
  tracingInterceptors,
  type Authenticator,
  type Principal,
  type RunningServer,
  type Tracing,
} from "@ledger/common";
import { DEFAULT_KEY_USAGE_FLUSH_MS, type LedgerConfig } from "./config.js";
import { authenticate, ensureDevAccount, principalOfAccount } from "./identity.js";
import { createProgramResolver } from "./programs.js";
import { createBatcher } from "./batcher.js";
import { createKeyUsage } from "./key-usage.js";
import routes, { INTERNAL_METHODS, PUBLIC_METHODS } from "./routes.js";

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

  const nats = connectNats(config, "ledger", log);
  const outbox = createOutbox({
    service: "ledger",
    sql,
    nats,
    stream: { name: config.natsStream, subjectPrefix: config.natsSubjectPrefix },
    log,
  });
  outbox.start();

  // Every key look-up notes the key's use: the ledger's own calls on each request (cache hits
  // included), the other services' through IdentityService each time their cache renews.
  const keyUsage = createKeyUsage({ sql, log, flushEveryMs: config.keyUsageFlushMs ?? DEFAULT_KEY_USAGE_FLUSH_MS });
  const noteUse = (principal: Principal | null) => {
    if (principal?.apiKeyId) keyUsage.record(principal.apiKeyId);
    return principal;
  };
  const lookUpKey: Authenticator = async (key) => noteUse(await authenticate(sql, key));
  const cached = cachedAuthenticator((key) => authenticate(sql, key));
  const auth: Authenticator = async (key) => noteUse(await cached(key));
  const server = await listen({
    name: "ledger",
    host: config.host,
    port: config.port,
    log,
    rpcBodyLimitBytes: config.rpcBodyLimitBytes,
    routes: routes({
      sql,
      outbox,
      batcher: createBatcher({ sql, outbox, subjectOf: (type) => eventSubject(config.natsSubjectPrefix, type), log, maxBatch: config.batchMax, maxInFlight: config.batchConcurrency, lingerMs: config.batchLingerMs }),
      // Uncached: the services asking cache the answer themselves, and two caches in a row would
      // add up to twice the delay before a revoked key is refused.
      authenticate: lookUpKey,
      resolveProgram: createProgramResolver(sql),
    }),
    interceptors: [
      ...tracingInterceptors(tracing),
      requestIdInterceptor(log),
      metricsInterceptor(),
      // Before authentication: a caller over its budget costs no key look-up.
      rateLimitInterceptor(config),
      authInterceptor({
        authenticate: auth,
        publicMethods: PUBLIC_METHODS,
        internalMethods: INTERNAL_METHODS,
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
      await keyUsage.stop();
      await outbox.stop();
      await nats.close();
      await sql.end({ timeout: 5 });
      await tracing?.shutdown();
      log.info("ledger stopped");
    },
  };
}
