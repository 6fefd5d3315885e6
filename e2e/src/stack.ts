import { randomBytes } from "node:crypto";
import { createClient, type Client } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import {
  DEFAULT_RPC_BODY_LIMIT_BYTES,
  STREAM_LIMITS,
  type InfraConfig,
  type RateLimitConfig,
  type StreamLimits,
  type TracingConfig,
} from "@ledger/common";
import { DEFAULT_CALL_TIMEOUT_MS, startGateway, type GatewayConfig, type GatewayHandle } from "@ledger/gateway";
import { startHold, type HoldConfig, type HoldHandle } from "@ledger/hold-service";
import {
  createAccount,
  DEFAULT_ENTITY_CACHE_SIZE,
  startLedger,
  type LedgerConfig,
  type LedgerHandle,
  type NewAccount,
} from "@ledger/ledger-service";
import { startNotification, type NotificationConfig, type NotificationHandle } from "@ledger/notification-service";
import { LedgerService } from "@ledger/proto/ledger/v1/ledger_pb.js";
import postgres from "postgres";
import { inject } from "vitest";
import { deleteStream } from "./events.js";
import { restClient, type Api } from "./rest-client.js";

/** The SERVICE_TOKEN every service of a test stack shares. */
export const TEST_SERVICE_TOKEN = "test-service-token-0123456789";

/** A ledger and gateway on port 0 against the run's database and NATS, with one account. */
export interface Stack {
  restUrl: string;
  ledgerUrl: string;
  databaseUrl: string;
  natsUrl: string;
  stream: string;
  subjectPrefix: string;
  /** Direct database access for invariant checks; search_path is the ledger schema. */
  sql: postgres.Sql<{ bigint: bigint }>;
  account: NewAccount;
  api: Api;
  /** A second account, for tenancy tests. */
  newAccount(name?: string): Promise<{ account: NewAccount; api: Api }>;
  /** A Connect client of the ledger (or of the replica at `url`) that sends `apiKey`. */
  ledgerClient(apiKey: string, url?: string): Client<typeof LedgerService>;
  ledger: LedgerHandle;
  /** Starts one more ledger process on the same database and stream, with `overrides` of its settings (closed with the stack). */
  startLedgerReplica(overrides?: Partial<LedgerConfig>): Promise<LedgerHandle>;
  hold: HoldHandle | undefined;
  /** The hold service's database (its own per stack, like the notification service's). */
  holdDatabaseUrl: string;
  /** A client of the hold database, search_path `hold`; made on first use. */
  holdSql(): postgres.Sql<{ bigint: bigint }>;
  /** Starts one more hold service on the same database and stream, with `overrides` of its settings (closed with the stack, or by the test). */
  startHoldReplica(overrides?: Partial<HoldConfig>): Promise<HoldHandle>;
  gateway: GatewayHandle;
  /** The notification service, when the stack was started with `notification`. */
  notification?: NotificationHandle;
  /**
   * The notification service's database (search_path `notification`), when it runs. Each stack
   * has its own: delivery workers claim any due delivery in their database, so stacks sharing one
   * would send each other's deliveries with the wrong settings.
   */
  notificationSql?: postgres.Sql<{ bigint: bigint }>;
  /** Starts one more notification process on the same database, stream and settings (some of them overridden). */
  startNotificationReplica(overrides?: Partial<NotificationConfig>): Promise<NotificationHandle>;
  close(): Promise<void>;
}

/** Options of `startStack`. */
export interface StackOptions {
  /** Another NATS than the run's, for tests that stop and start their own server. */
  natsUrl?: string;
  /** A hold service the test runs itself (as a child process it can kill); none is started here. */
  externalHoldUrl?: string;
  /** How old unfinished hold work must be before recovery finishes it. */
  recoveryAfterMs?: number;
  /** How often the hold service looks for due holds (200 ms); a long one keeps expiry from running during a test. */
  holdExpiryIntervalMs?: number;
  /** Gateway settings to override, for example a low rate limit. */
  gateway?: Partial<GatewayConfig>;
  /**
   * Starts the notification service too. Test defaults: private networks allowed (receivers are
   * on 127.0.0.1), a short retry schedule (300ms,300ms), a 2 s timeout, a random secret key.
   * Anything given here overrides them, for example `webhookExtraCa` to trust a test CA.
   */
  notification?: Partial<NotificationConfig>;
  /** OpenTelemetry tracing for every process of the stack (off when absent, as in production). */
  tracing?: TracingConfig;
  /** Request budgets of the RPC ports (ledger, hold, notification); off unless given, like the gateway's. */
  rpcRateLimit?: RateLimitConfig;
  /** Ledger settings to override, for example how often key usage is written. */
  ledger?: Partial<LedgerConfig>;
  /**
   * How the gateway and the services call each other: over HTTP/2 on their ports, as when deployed
   * apart, or in memory, as `npm start` runs them. The default is `setDefaultWiring`'s, HTTP/2 unless
   * a test file changed it: how one file runs another's whole suite in memory (*.in-memory.test.ts).
   */
  wiring?: "http" | "memory";
  /** The event stream's limits where they differ from the defaults, for example a small `maxBytes`. */
  streamLimits?: Partial<StreamLimits>;
}

let defaultWiring: "http" | "memory" = "http";

/**
 * Sets how this test file's stacks are wired unless a `startStack` call says otherwise. A file
 * that sets "memory" and then imports another test file runs that file's tests against stacks
 * wired as `npm start` wires them (stacks start in hooks, after every import has run).
 */
export function setDefaultWiring(wiring: "http" | "memory"): void {
  defaultWiring = wiring;
}

/**
 * Starts a whole ledger stack for one test file. Each stack publishes on a stream and subject
 * prefix of its own, so test files running side by side never see each other's events.
 */
export async function startStack(options: StackOptions = {}): Promise<Stack> {
  const settings = stackSettings(options);
  const { databaseUrl, natsUrl, tag, stream, subjectPrefix } = settings;
  const ledgerConfig = ledgerConfigOf(settings);
  const ledger = await startLedger(ledgerConfig);
  const ledgerReplicas: LedgerHandle[] = [];
  const startLedgerReplica = async (overrides: Partial<LedgerConfig> = {}) => {
    const handle = await startLedger(Object.assign({}, ledgerConfig, overrides));
    ledgerReplicas.push(handle);
    return handle;
  };
  const ledgerPeer = settings.inMemory ? ledger.server.inProcess : undefined;
  // The hold and notification services get databases of their own per stack: their background
  // workers (expiry, recovery, deliveries) take any due row in their database, and must not pick
  // up another test file's rows with this stack's settings.
  const holdDatabase = siblingDatabase(databaseUrl, `hold_${tag}`);
  const holdConfig = holdConfigOf(settings, holdDatabase, ledger.server.url);
  const holdReplicas: HoldHandle[] = [];
  const startHoldReplica = async (overrides: Partial<HoldConfig> = {}) => {
    const handle = await startHold(Object.assign({}, holdConfig, overrides), { ledger: ledgerPeer });
    holdReplicas.push(handle);
    return handle;
  };
  const hold = options.externalHoldUrl ? undefined : await startHoldReplica();
  const notificationDatabase = siblingDatabase(databaseUrl, `ntf_${tag}`);
  const notificationConfig = notificationConfigOf(settings, notificationDatabase, ledger.server.url);
  const replicas: NotificationHandle[] = [];
  const startReplica = async (overrides: Partial<NotificationConfig> = {}) => {
    if (!notificationConfig) throw new Error("startStack was called without the notification option");
    const handle = await startNotification({ ...notificationConfig, ...overrides }, { ledger: ledgerPeer });
    replicas.push(handle);
    return handle;
  };
  const notification = notificationConfig ? await startReplica() : undefined;
  const notificationSql = notification ? schemaClient(notificationDatabase.toString(), "notification") : undefined;
  // The hold database exists once the in-process service migrated it, or once a test's own hold process did.
  let holdSqlClient: postgres.Sql<{ bigint: bigint }> | undefined;
  const holdSql = () => (holdSqlClient ??= schemaClient(holdDatabase.toString(), "hold"));
  const gateway = await startStackGateway(settings, ledger, hold, notification);
  const sql = schemaClient(databaseUrl, "ledger", 4);
  const restUrl = `${gateway.server.url}/v1`;
  const ledgerClients = new LedgerClients();
  const newAccount = async (name = "test account") => {
    const account = await createAccount(sql as never, name);
    return { account, api: restClient(restUrl, account.api_key) };
  };
  const first = await newAccount();
  return {
    restUrl,
    ledgerUrl: ledger.server.url,
    databaseUrl,
    natsUrl,
    stream,
    subjectPrefix,
    sql,
    account: first.account,
    api: first.api,
    newAccount,
    ledgerClient: (apiKey, url = ledger.server.url) => ledgerClients.client(apiKey, url),
    ledger,
    startLedgerReplica,
    hold,
    holdDatabaseUrl: holdDatabase.toString(),
    holdSql,
    startHoldReplica,
    gateway,
    ...(notification ? { notification, notificationSql } : {}),
    startNotificationReplica: startReplica,
    async close() {
      try {
        await gateway.close();
        for (const replica of holdReplicas) await replica.close().catch(() => {});
        for (const replica of replicas) await replica.close();
        if (notificationSql) {
          await notificationSql.end({ timeout: 2 });
          await sql.unsafe(`drop database if exists "${databaseName(notificationDatabase)}" with (force)`).catch(() => {});
        }
        await holdSqlClient?.end({ timeout: 2 });
        await sql.unsafe(`drop database if exists "${databaseName(holdDatabase)}" with (force)`).catch(() => {});
        for (const replica of ledgerReplicas) await replica.close().catch(() => {});
        await ledger.close();
        await sql.end({ timeout: 2 });
      } finally {
        // The stream is the stack's own: a shared NATS would otherwise keep one per test file, and
        // a close that failed half-way must not keep it either.
        await deleteStream(natsUrl, stream);
      }
    },
  };
}

/**
 * What the processes of one stack are started with: the run's database and NATS, a stream and
 * subject prefix of the stack's own, and what the test asked for.
 */
interface StackSettings {
  options: StackOptions;
  databaseUrl: string;
  natsUrl: string;
  /** Names what is the stack's own: its stream, subject prefix and databases. */
  tag: string;
  stream: string;
  subjectPrefix: string;
  logLevel: string;
  /** The services and the gateway call each other in memory rather than over HTTP/2. */
  inMemory: boolean;
  /** The settings every service of the stack shares: its RPC limits, NATS, log level and tracing. */
  infra: InfraConfig;
}

/** The settings of a new stack, from the run's database and NATS and the test's `options`. */
function stackSettings(options: StackOptions): StackSettings {
  const databaseUrl = inject("databaseUrl");
  const natsUrl = options.natsUrl ?? inject("natsUrl");
  const tag = randomBytes(4).toString("hex");
  const stream = `${inject("natsStreamPrefix")}${tag}`;
  const subjectPrefix = `test${tag}`;
  const logLevel = process.env["TEST_LOG_LEVEL"] ?? "silent";
  const inMemory = (options.wiring ?? defaultWiring) === "memory";
  // What every RPC port of the stack accepts: the production body limit, and no rate limit unless asked.
  const rpcLimits = {
    rpcBodyLimitBytes: DEFAULT_RPC_BODY_LIMIT_BYTES,
    ...(options.rpcRateLimit ?? { rateLimitPerSecond: 0, rateLimitBurst: 1 }),
  };
  const natsStreamLimits: StreamLimits = { ...STREAM_LIMITS, ...options.streamLimits };
  const infra = {
    ...rpcLimits,
    natsUrl,
    natsStream: stream,
    natsSubjectPrefix: subjectPrefix,
    natsStreamLimits,
    logLevel,
    tracing: options.tracing,
  };
  return { options, databaseUrl, natsUrl, tag, stream, subjectPrefix, logLevel, inMemory, infra };
}

/** The stack's ledger settings: test-sized pools and batches, with `options.ledger` over them. */
function ledgerConfigOf(settings: StackSettings): LedgerConfig {
  const { options } = settings;
  return {
    ...settings.infra,
    databaseUrl: settings.databaseUrl,
    host: "127.0.0.1",
    port: 0,
    databasePoolSize: 10,
    batchMax: 128,
    batchConcurrency: 4,
    batchLingerMs: 2,
    batchHalfAbove: 32,
    // The partitioned run (vitest.partitioned.config.ts) sets it: one account per transaction, as
    // a database distributed by account needs.
    batchOneAccount: process.env["LEDGER_BATCH_ONE_ACCOUNT"] === "true",
    entityCacheSize: DEFAULT_ENTITY_CACHE_SIZE,
    chainedWrites: true,
    serviceToken: TEST_SERVICE_TOKEN,
    ...options.ledger,
  };
}

/** The stack's hold service settings, on `database` and calling the ledger at `ledgerUrl`. */
function holdConfigOf(settings: StackSettings, database: URL, ledgerUrl: string): HoldConfig {
  const { options } = settings;
  return {
    ...settings.infra,
    databaseUrl: database.toString(),
    host: "127.0.0.1",
    port: 0,
    ledgerUrl,
    serviceToken: TEST_SERVICE_TOKEN,
    expiryIntervalMs: options.holdExpiryIntervalMs ?? 200,
    databasePoolSize: 10,
    recoveryAfterMs: options.recoveryAfterMs ?? 1_000,
    batchMax: 64,
    batchConcurrency: 4,
    batchLingerMs: 1,
  };
}

/**
 * The stack's notification service settings, on `database` and calling the ledger at `ledgerUrl`:
 * the test defaults of `StackOptions.notification` with its settings over them. Undefined when the
 * stack runs no notification service.
 */
function notificationConfigOf(settings: StackSettings, database: URL, ledgerUrl: string): NotificationConfig | undefined {
  const { options } = settings;
  return options.notification
    ? {
        ...settings.infra,
        databaseUrl: database.toString(),
        host: "127.0.0.1",
        port: 0,
        ledgerUrl,
        serviceToken: TEST_SERVICE_TOKEN,
        databasePoolSize: 5,
        webhookAllowHttp: false,
        webhookAllowPrivateNetworks: true,
        webhookTimeoutMs: 2_000,
        webhookRetryScheduleMs: [300, 300],
        webhookConcurrency: 32,
        secretKey: randomBytes(32),
        ...options.notification,
      }
    : undefined;
}

/**
 * Starts the stack's gateway in front of its services (the hold service at `options.externalHoldUrl`
 * when the test runs its own), over HTTP/2 or in memory as the stack is wired.
 */
function startStackGateway(
  settings: StackSettings,
  ledger: LedgerHandle,
  hold: HoldHandle | undefined,
  notification: NotificationHandle | undefined,
): Promise<GatewayHandle> {
  const { options } = settings;
  return startGateway(
    {
      host: "127.0.0.1",
      port: 0,
      opsPort: 0,
      ledgerUrl: ledger.server.url,
      holdUrl: options.externalHoldUrl ?? hold!.server.url,
      // Without a notification service the webhook paths answer 503, as in production when it is down.
      notificationUrl: notification?.server.url ?? "http://127.0.0.1:9",
      bodyLimitBytes: 64 * 1024,
      batchBodyLimitBytes: 4 * 1024 * 1024,
      callTimeoutMs: DEFAULT_CALL_TIMEOUT_MS,
      logLevel: settings.logLevel,
      rateLimitPerSecond: 0,
      rateLimitBurst: 1,
      tracing: options.tracing,
      ...options.gateway,
    },
    settings.inMemory
      ? {
          ledger: ledger.server.inProcess,
          hold: options.externalHoldUrl ? undefined : hold!.server.inProcess,
          notification: notification?.server.inProcess,
        }
      : {},
  );
}

/** Connect clients of a stack's ledger processes, sharing one HTTP/2 transport per ledger URL. */
class LedgerClients {
  private readonly transports = new Map<string, ReturnType<typeof createConnectTransport>>();

  /** A client of the ledger at `baseUrl` that sends `apiKey` with every call. */
  client(apiKey: string, baseUrl: string): Client<typeof LedgerService> {
    const transport = this.transportOf(baseUrl);
    return createClient(LedgerService, {
      ...transport,
      unary: (method, signal, timeoutMs, header, input, contextValues) => {
        const headers = new Headers(header);
        headers.set("authorization", apiKey);
        return transport.unary(method, signal, timeoutMs, headers, input, contextValues);
      },
    });
  }

  /** The transport to `baseUrl`, made on first use. */
  private transportOf(baseUrl: string) {
    let transport = this.transports.get(baseUrl);
    if (!transport) {
      transport = createConnectTransport({ baseUrl, httpVersion: "2", useBinaryFormat: true });
      this.transports.set(baseUrl, transport);
    }
    return transport;
  }
}

/** The URL of a database beside `url`'s, named `<its name>_<suffix>`. */
function siblingDatabase(url: string, suffix: string): URL {
  const sibling = new URL(url);
  sibling.pathname = `${sibling.pathname}_${suffix}`;
  return sibling;
}

function databaseName(url: URL): string {
  return decodeURIComponent(url.pathname.slice(1));
}

/**
 * A small client of one service's schema, with bigints as bigint: for checks and set-up beside the
 * services. `debug` hears every statement it sends, with its parameters.
 */
export function schemaClient(
  url: string,
  schema: string,
  max = 2,
  debug?: (connection: number, query: string, parameters: unknown[]) => void,
): postgres.Sql<{ bigint: bigint }> {
  return postgres(url, {
    max,
    ...(debug ? { debug } : {}),
    types: { bigint: postgres.BigInt },
    onnotice: () => {},
    connection: { search_path: schema },
  }) as unknown as postgres.Sql<{ bigint: bigint }>;
}
