import {
  ConfigError,
  envBool,
  envInt,
  envOptional,
  envString,
  envUrl,
  readDatabaseUrl,
  readInfraConfig,
  readServiceToken,
  type InfraConfig,
} from "@ledger/common";

type Env = Record<string, string | undefined>;

/** Configuration of the notification service, read once at start. */
export interface NotificationConfig extends InfraConfig {
  databaseUrl: string;
  host: string;
  port: number;
  /** The ledger's RPC server, which answers API key look-ups. */
  ledgerUrl: string;
  /** Shared secret of the installation's services (SERVICE_TOKEN): its key look-ups are not rate limited. */
  serviceToken: string;
  databasePoolSize: number;
  /** Accept `http://` destination URLs (development only). */
  webhookAllowHttp: boolean;
  /** Deliver to loopback, private, link-local and metadata addresses (development and tests only). */
  webhookAllowPrivateNetworks: boolean;
  /** Time budget of one attempt, connection to last byte. */
  webhookTimeoutMs: number;
  /** Gaps between attempts, in ms: a delivery makes `length + 1` attempts at most. */
  webhookRetryScheduleMs: number[];
  /** Attempts in flight at once, per process. */
  webhookConcurrency: number;
  /** The worker's pause before looking again at a destination another process holds; not an environment setting (tests lengthen it). */
  webhookContendedPauseMs?: { firstMs: number; maxMs: number };
  /** AES-256-GCM key that encrypts signing secrets at rest. */
  secretKey: Buffer;
  /**
   * Extra PEM certificates to trust for deliveries, beside Node's roots. Deployments use
   * NODE_EXTRA_CA_CERTS instead; this exists so tests can trust a CA made at run time.
   */
  webhookExtraCa?: string;
}

/** 8 attempts over about an hour (docs/webhooks.md#retries-and-delivery-states). */
export const DEFAULT_RETRY_SCHEDULE = "5s,30s,2m,5m,10m,20m,25m";

/**
 * A fixed key for development, so a restart can still read the secrets it stored. It is public
 * (it is in this file), which is why production refuses to start with it.
 */
const DEVELOPMENT_SECRET_KEY = Buffer.from("ledger-notification-dev-key-32by", "utf8");

/** Parses `5s,30s,2m` (units ms, s, m, h) into milliseconds. */
export function parseRetrySchedule(raw: string, variable = "WEBHOOK_RETRY_SCHEDULE"): number[] {
  const parts = raw.split(",").map((p) => p.trim());
  if (parts.length === 0 || parts.length > 50) throw new ConfigError(variable, "must list 1 to 50 gaps such as 5s,30s,2m");
  return parts.map((part) => {
    const match = /^(\d+)(ms|s|m|h)$/.exec(part);
    if (!match)
      throw new ConfigError(variable, `has ${JSON.stringify(part)}; each gap is a whole number with ms, s, m or h, as in 5s,30s,2m`);
    const ms = Number(match[1]) * { ms: 1, s: 1_000, m: 60_000, h: 3_600_000 }[match[2] as "ms" | "s" | "m" | "h"];
    if (ms <= 0 || ms > 24 * 3_600_000) throw new ConfigError(variable, `has ${part}; each gap must be more than 0 and at most 24h`);
    return ms;
  });
}

/** Reads the signing-secret key; production without one stops the start. */
export function readSecretKey(env: Env, warn: (message: string) => void): Buffer {
  const raw = envOptional(env, "NOTIFICATION_SECRET_KEY");
  if (raw === undefined) {
    if (env["NODE_ENV"] === "production") {
      throw new ConfigError(
        "NOTIFICATION_SECRET_KEY",
        "is required when NODE_ENV=production: set it to the base64 of 32 random bytes (openssl rand -base64 32)",
      );
    }
    warn(
      "NOTIFICATION_SECRET_KEY is not set: webhook secrets are encrypted with a fixed development key. Set it in any real installation.",
    );
    return DEVELOPMENT_SECRET_KEY;
  }
  const key = Buffer.from(raw, "base64");
  if (key.length !== 32 || key.toString("base64").replace(/=+$/, "") !== raw.trim().replace(/=+$/, "")) {
    throw new ConfigError("NOTIFICATION_SECRET_KEY", "must be the base64 of exactly 32 bytes (openssl rand -base64 32)");
  }
  return key;
}

/** Reads and validates the notification service's configuration. */
export function readNotificationConfig(
  env: Env = process.env,
  warn: (message: string) => void = (m) => console.warn(`notification: ${m}`),
): NotificationConfig {
  return Object.assign({}, readInfraConfig(env), {
    databaseUrl: readDatabaseUrl(env, "NOTIFICATION_DATABASE_URL"),
    host: envString(env, "NOTIFICATION_HOST", "127.0.0.1"),
    port: envInt(env, "NOTIFICATION_PORT", 8083, 0, 65535),
    ledgerUrl: envUrl(env, "LEDGER_URL", "http://127.0.0.1:8081", ["http", "https"]),
    serviceToken: readServiceToken(env),
    databasePoolSize: envInt(env, "NOTIFICATION_DATABASE_POOL_SIZE", 10, 2, 500),
    webhookAllowHttp: envBool(env, "WEBHOOK_ALLOW_HTTP", false),
    webhookAllowPrivateNetworks: envBool(env, "WEBHOOK_ALLOW_PRIVATE_NETWORKS", false),
    webhookTimeoutMs: envInt(env, "WEBHOOK_TIMEOUT_MS", 10_000, 100, 120_000),
    webhookRetryScheduleMs: parseRetrySchedule(envString(env, "WEBHOOK_RETRY_SCHEDULE", DEFAULT_RETRY_SCHEDULE)),
    webhookConcurrency: envInt(env, "WEBHOOK_CONCURRENCY", 256, 1, 2000),
    secretKey: readSecretKey(env, warn),
  });
}
