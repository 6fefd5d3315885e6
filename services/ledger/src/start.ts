import { fileURLToPath } from "node:url";
import { cachedAuthenticator, eventSubject, startService, type Authenticator, type Principal, type ServiceHandle } from "@ledger/common";
import { DEFAULT_KEY_USAGE_FLUSH_MS, type LedgerConfig } from "./config.js";
import { authenticate, ensureDevAccount, principalOfAccount } from "./identity.js";
import { createProgramResolver } from "./programs.js";
import { createBatcher } from "./batcher.js";
import { postgresBatchStore } from "./batch-store.js";
import { createKeyUsage } from "./key-usage.js";
import routes, { INTERNAL_METHODS, PUBLIC_METHODS } from "./routes.js";

const MIGRATIONS = fileURLToPath(new URL("../migrations", import.meta.url));

/** A running ledger service. */
export type LedgerHandle = ServiceHandle;

/** Starts the ledger: what every service has (startService), its outbox, group commit and RPC handlers. */
export function startLedger(config: LedgerConfig): Promise<LedgerHandle> {
  return startService({
    name: "ledger",
    config,
    migrationsDir: MIGRATIONS,
    outboxRowsByAccount: true,
    async parts({ sql, log, lifecycle, openOutbox }) {
      if (config.devApiKey) await ensureDevAccount(sql, config.devApiKey);
      const outbox = openOutbox();

      // Every key look-up notes the key's use: the ledger's own calls on each request (cache hits
      // included), the other services' through IdentityService each time their cache renews.
      const keyUsage = createKeyUsage({ sql, log, flushEveryMs: config.keyUsageFlushMs ?? DEFAULT_KEY_USAGE_FLUSH_MS });
      lifecycle.onClose("API key usage", () => keyUsage.stop());
      const noteUse = (principal: Principal | null) => {
        if (principal?.apiKeyId) keyUsage.record(principal.apiKeyId);
        return principal;
      };
      const lookUpKey: Authenticator = async (key) => noteUse(await authenticate(sql, key));
      const cached = cachedAuthenticator((key) => authenticate(sql, key));
      const auth: Authenticator = async (key) => noteUse(await cached(key));

      return {
        routes: routes({
          sql,
          outbox,
          batcher: createBatcher({
            store: postgresBatchStore({
              sql,
              subjectOf: (type) => eventSubject(config.natsSubjectPrefix, type),
              entityCacheSize: config.entityCacheSize,
            }),
            outbox,
            log,
            maxBatch: config.batchMax,
            maxInFlight: config.batchConcurrency,
            lingerMs: config.batchLingerMs,
            halfAbove: config.batchHalfAbove,
            oneAccountPerTransaction: config.batchOneAccount,
            chainedWrites: config.chainedWrites,
          }),
          // Uncached: the services asking cache the answer themselves, and two caches in a row would
          // add up to twice the delay before a revoked key is refused.
          authenticate: lookUpKey,
          resolveProgram: createProgramResolver(sql),
        }),
        auth: {
          authenticate: auth,
          publicMethods: PUBLIC_METHODS,
          internalMethods: INTERNAL_METHODS,
          service: { token: config.serviceToken, resolveAccount: (accountId) => principalOfAccount(sql, accountId) },
        },
      };
    },
  });
}
