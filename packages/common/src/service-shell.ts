import type { ConnectRouter } from "@connectrpc/connect";
import { streamSettingsOf, type InfraConfig } from "./config.js";
import { installationOf, openDatabase, type Sql } from "./db.js";
import { startIdempotencySweep } from "./idempotency.js";
import { openProcess, type Lifecycle } from "./lifecycle.js";
import type { Logger } from "./logger.js";
import { metricsInterceptor } from "./metrics.js";
import { connectNats, ensureEventStream, type NatsHandle, type StreamSettings } from "./nats.js";
import { createOutbox, type Outbox } from "./outbox.js";
import { rateLimitInterceptor } from "./rate-limit.js";
import { authInterceptor, type AuthOptions } from "./auth.js";
import { requestIdInterceptor } from "./request-id.js";
import { listen, type ReadinessCheck, type RunningServer } from "./server.js";
import { nulTextInterceptor } from "./text.js";
import { tracingInterceptors, type Tracing } from "./tracing.js";

/** What the shell reads from a service's configuration. */
export interface ServiceConfig extends InfraConfig {
  databaseUrl: string;
  databasePoolSize: number;
  host: string;
  port: number;
  /** What the installation's services call each other with (also exempts them from rate limits). */
  serviceToken: string;
}

/** What a service's own start gets from the shell. */
export interface ServiceContext {
  log: Logger;
  /** Present when tracing is configured. */
  tracing: Tracing | undefined;
  /** The service's database, migrated. */
  sql: Sql;
  nats: NatsHandle;
  /** Where the service's own parts register how they close; they close after the RPC server. */
  lifecycle: Lifecycle;
  /** The service's transactional outbox, its relay started (for a service that writes events). */
  openOutbox(): Outbox;
}

/** What a service is, beyond what every service has. */
export interface ServiceParts<Extra> {
  /** Mounts the service's RPC handlers. */
  routes: (router: ConnectRouter) => void;
  /** How calls are authenticated: the ledger checks API keys itself, the others ask it. */
  auth: AuthOptions;
  /** Readiness checks besides the database and NATS (a service it cannot work without). */
  readiness?: Record<string, ReadinessCheck>;
  /** What the running service offers besides its server (the notification service's `wake`). */
  extra?: Extra;
}

/** What a service declares: its name (also its schema), its migrations and its own parts. */
export interface ServiceDefinition<Config extends ServiceConfig, Extra> {
  name: string;
  config: Config;
  migrationsDir: string;
  /** The service's `outbox_writes` rows are keyed by account (`OutboxOptions.rowsByAccount`). */
  outboxRowsByAccount?: boolean;
  /**
   * Starts what is the service's own (handlers, background loops) once its database and NATS are
   * there; parts that must close register with `context.lifecycle`.
   */
  parts(context: ServiceContext): Promise<ServiceParts<Extra>> | ServiceParts<Extra>;
}

/** A running service. */
export interface ServiceHandle {
  server: RunningServer;
  /** Present when tracing is configured. */
  tracing: Tracing | undefined;
  /** SIGTERM path: stop accepting, finish in-flight calls, stop the service's parts, flush the outbox, close connections. */
  close(): Promise<void>;
}

/**
 * Starts an RPC service (docs/architecture.md#the-services-and-who-owns-what): logger and tracing,
 * its database (created if missing, migrated), NATS and a check that the event stream is this
 * installation's, the service's own parts, then its RPC port
 * behind the interceptors every service has (tracing, request id, metrics, rate limit,
 * authentication, no NUL in any string), readiness for the database, NATS and whatever the
 * service adds, and the idempotency-key sweep. `close` undoes it in reverse order; a start that
 * fails half-way closes what it had started.
 */
export async function startService<Config extends ServiceConfig, Extra = Record<never, never>>(
  definition: ServiceDefinition<Config, Extra>,
): Promise<ServiceHandle & Extra> {
  const { name, config } = definition;
  const { log, tracing, lifecycle } = await openProcess(name, config);
  return lifecycle.starting(async () => {
    const sql = await openDatabase({
      url: config.databaseUrl,
      schema: name,
      migrationsDir: definition.migrationsDir,
      max: config.databasePoolSize,
      log,
      applicationName: name,
    });
    lifecycle.onClose("database", () => sql.end({ timeout: 5 }));
    const nats = connectNats(config, name, log);
    lifecycle.onClose("NATS", () => nats.close());
    const stream = streamSettingsOf(config);
    await refuseAnotherInstallationsStream(nats, stream, sql, log);
    let outbox: Outbox | undefined;
    const openOutbox = () =>
      (outbox ??= lifecycle.run(
        "outbox relay",
        createOutbox({ service: name, sql, nats, stream, log, rowsByAccount: definition.outboxRowsByAccount === true }),
      ));

    const parts = await definition.parts({ log, tracing, sql, nats, lifecycle, openOutbox });

    const server = await listen({
      name,
      host: config.host,
      port: config.port,
      log,
      rpcBodyLimitBytes: config.rpcBodyLimitBytes,
      unaryFastPath: config.rpcUnaryFastPath,
      headerTimeoutMs: config.headerTimeoutMs,
      idleTimeoutMs: config.idleTimeoutMs,
      routes: parts.routes,
      interceptors: [
        ...tracingInterceptors(tracing),
        requestIdInterceptor(log),
        metricsInterceptor(),
        // Before authentication: a caller over its budget costs no key look-up.
        rateLimitInterceptor(config),
        authInterceptor(parts.auth),
        // After authentication: a caller without a key learns nothing about its input.
        nulTextInterceptor(),
      ],
      readiness: {
        database: async () => (await sql`select 1`).length === 1,
        nats: () => nats.ping(),
        ...parts.readiness,
      },
    });
    lifecycle.onClose("RPC server", () => server.close());
    lifecycle.onClose("idempotency sweep", startIdempotencySweep(sql, log));

    return Object.assign({}, parts.extra as Extra, { server, tracing, close: () => lifecycle.close() });
  });
}

/** How long a start waits for NATS to check the event stream before it goes on without. */
const STREAM_CHECK_WAIT_MS = 3_000;

/**
 * Stops the start when the event stream is another installation's (docs/operations.md#one-stream-per-installation),
 * as soon as NATS answers, within a few seconds. A start does not wait for NATS longer: while it is
 * away, the outbox relay and the notification consumer make the same check before they publish or
 * consume, and refuse the stream then.
 */
async function refuseAnotherInstallationsStream(nats: NatsHandle, stream: StreamSettings, sql: Sql, log: Logger): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const nc = await Promise.race([
    nats.connected().catch(() => undefined),
    new Promise<undefined>((resolve) => {
      timer = setTimeout(() => resolve(undefined), STREAM_CHECK_WAIT_MS);
    }),
  ]);
  clearTimeout(timer);
  if (nc) await ensureEventStream(nc, stream, [await installationOf(sql)], log, { applyLimits: true });
}
