import {
  ConfigError,
  envInt,
  envOptional,
  envString,
  envUrl,
  readDatabaseUrl,
  readInfraConfig,
  readServiceToken,
  type InfraConfig,
} from "@ledger/common";
import { CRASH_POINTS, type CrashPoint } from "./crash.js";

/** Configuration of the hold service, read once at start. */
export interface HoldConfig extends InfraConfig {
  databaseUrl: string;
  /** Postgres connections (HOLD_DATABASE_POOL_SIZE): group commit uses up to `batchConcurrency` of them; reads, expiry and recovery the rest. */
  databasePoolSize: number;
  host: string;
  port: number;
  /** Where the ledger's RPC server is. */
  ledgerUrl: string;
  serviceToken: string;
  /** How often due holds are looked for; expiry happens within this plus one round trip. */
  expiryIntervalMs: number;
  /** Unfinished work older than this is taken to be abandoned by a crashed process and finished. */
  recoveryAfterMs: number;
  /** Group commit: most intents and completions in one transaction (HOLD_BATCH_MAX). */
  batchMax: number;
  /** Group commit: transactions in flight at once (HOLD_BATCH_CONCURRENCY). */
  batchConcurrency: number;
  /** Group commit: how long a transaction waits for company while another is in flight (HOLD_BATCH_LINGER_MS). */
  batchLingerMs: number;
  /** Test hook: exit the process at this point of a hold operation (HOLD_CRASH_AT). */
  crashAt?: CrashPoint;
}

/** Reads and validates the hold service's configuration. */
export function readHoldConfig(env: Record<string, string | undefined> = process.env): HoldConfig {
  const crashAt = envOptional(env, "HOLD_CRASH_AT");
  // Crash injection is a test hook: in production a stray setting would kill every hold operation.
  if (crashAt !== undefined && env["NODE_ENV"] === "production") {
    throw new ConfigError("HOLD_CRASH_AT", "must not be set when NODE_ENV=production: it is a test hook that kills the process");
  }
  if (crashAt !== undefined && !CRASH_POINTS.includes(crashAt as CrashPoint)) {
    throw new ConfigError("HOLD_CRASH_AT", `must be one of ${CRASH_POINTS.join(", ")}`);
  }
  return Object.assign({}, readInfraConfig(env), {
    databaseUrl: readDatabaseUrl(env, "HOLD_DATABASE_URL"),
    databasePoolSize: envInt(env, "HOLD_DATABASE_POOL_SIZE", 10, 2, 500),
    host: envString(env, "HOLD_HOST", "127.0.0.1"),
    port: envInt(env, "HOLD_PORT", 8082, 0, 65535),
    ledgerUrl: envUrl(env, "LEDGER_URL", "http://127.0.0.1:8081", ["http", "https"]),
    serviceToken: readServiceToken(env),
    expiryIntervalMs: envInt(env, "HOLD_EXPIRY_INTERVAL_MS", 1_000, 50, 60_000),
    recoveryAfterMs: envInt(env, "HOLD_RECOVERY_AFTER_MS", 5_000, 100, 600_000),
    batchMax: envInt(env, "HOLD_BATCH_MAX", 64, 1, 1_000),
    batchConcurrency: envInt(env, "HOLD_BATCH_CONCURRENCY", 4, 1, 64),
    batchLingerMs: envInt(env, "HOLD_BATCH_LINGER_MS", 1, 0, 100),
    ...(crashAt ? { crashAt: crashAt as CrashPoint } : {}),
  });
}
