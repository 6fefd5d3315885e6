import {
  ConfigError,
  envBool,
  envInt,
  envOptional,
  envString,
  readDatabaseUrl,
  readInfraConfig,
  readServiceToken,
  type InfraConfig,
} from "@ledger/common";

/** LEDGER_KEY_USAGE_FLUSH_MS unless set: `last_used_at` to the minute, each key's row written at most once a minute. */
export const DEFAULT_KEY_USAGE_FLUSH_MS = 60_000;

/**
 * LEDGER_ENTITY_CACHE_SIZE unless set: about 4 MB of the process's memory, and room for the
 * entities an installation moves money between in any few seconds (docs/architecture.md#cached-balances).
 */
export const DEFAULT_ENTITY_CACHE_SIZE = 10_000;

/**
 * LEDGER_BATCH_MAX unless set. A transaction of 1,000 commands wrote a statement of about 1 MB of
 * parameter strings, which V8 puts straight into its old generation (over 128 KB each), where only a
 * full collection frees them; at 300 they stay young. Three 100-item batch calls still share a
 * transaction, and they ran as fast, in one process and apart (docs/operations.md#memory).
 */
export const DEFAULT_BATCH_MAX = 300;

/** Configuration of the ledger service, read once at start. */
export interface LedgerConfig extends InfraConfig {
  databaseUrl: string;
  host: string;
  port: number;
  /** When set, start-up makes sure an account with this key and a default program exist. */
  devApiKey?: string;
  databasePoolSize: number;
  /**
   * Group commit: most money commands in one transaction, a batch call's items counted one by one
   * (LEDGER_BATCH_MAX). Large enough that concurrent batch calls share a transaction instead of
   * waiting on each other's row locks; a call larger than this is never split, and has one to itself.
   */
  batchMax: number;
  /** Group commit: transactions in flight at once (LEDGER_BATCH_CONCURRENCY). */
  batchConcurrency: number;
  /** Group commit: how long a batch waits for company while another is in flight (LEDGER_BATCH_LINGER_MS). */
  batchLingerMs: number;
  /** Group commit: above this many commands outstanding, a transaction takes at most half (LEDGER_BATCH_HALF_ABOVE; 0 turns it off). */
  batchHalfAbove: number;
  /**
   * Group commit: one account's commands per transaction, never two accounts' together
   * (LEDGER_BATCH_ONE_ACCOUNT): what a Postgres distributed by account needs so that each
   * transaction commits on one node (docs/scaling.md). Off unless set.
   */
  batchOneAccount: boolean;
  /** Ordinary entities whose balances the process keeps for the cached path (LEDGER_ENTITY_CACHE_SIZE; 0 turns the path off). */
  entityCacheSize: number;
  /**
   * Group commit: a cached batch may rest on the rows another batch of the process has sent and not
   * yet committed, and go to Postgres right behind it (LEDGER_CHAINED_WRITES; on unless "false").
   * docs/decisions/chained-writes.md.
   */
  chainedWrites: boolean;
  /** Shared secret of the installation's services (SERVICE_TOKEN). */
  serviceToken: string;
  /** How often API keys' `last_used_at` is written, in one statement (LEDGER_KEY_USAGE_FLUSH_MS); a minute unless set. */
  keyUsageFlushMs?: number;
}

/** Reads and validates the ledger's configuration. */
export function readLedgerConfig(env: Record<string, string | undefined> = process.env): LedgerConfig {
  const devApiKey = envOptional(env, "LEDGER_DEV_API_KEY");
  if (devApiKey !== undefined && !/^[\x21-\x7e]{16,128}$/.test(devApiKey)) {
    throw new ConfigError("LEDGER_DEV_API_KEY", "must be 16 to 128 printable characters without spaces");
  }
  return Object.assign({}, readInfraConfig(env), {
    databaseUrl: readDatabaseUrl(env, "LEDGER_DATABASE_URL"),
    host: envString(env, "LEDGER_HOST", "127.0.0.1"),
    port: envInt(env, "LEDGER_PORT", 8081, 0, 65535),
    databasePoolSize: envInt(env, "LEDGER_DATABASE_POOL_SIZE", 20, 1, 500),
    batchMax: envInt(env, "LEDGER_BATCH_MAX", DEFAULT_BATCH_MAX, 1, 1_000),
    batchConcurrency: envInt(env, "LEDGER_BATCH_CONCURRENCY", 4, 1, 64),
    batchLingerMs: envInt(env, "LEDGER_BATCH_LINGER_MS", 2, 0, 100),
    batchHalfAbove: envInt(env, "LEDGER_BATCH_HALF_ABOVE", 32, 0, 1_000),
    batchOneAccount: envBool(env, "LEDGER_BATCH_ONE_ACCOUNT", false),
    entityCacheSize: envInt(env, "LEDGER_ENTITY_CACHE_SIZE", DEFAULT_ENTITY_CACHE_SIZE, 0, 1_000_000),
    chainedWrites: envBool(env, "LEDGER_CHAINED_WRITES", true),
    serviceToken: readServiceToken(env),
    keyUsageFlushMs: envInt(env, "LEDGER_KEY_USAGE_FLUSH_MS", DEFAULT_KEY_USAGE_FLUSH_MS, 100, 3_600_000),
    ...(devApiKey ? { devApiKey } : {}),
  });
}
