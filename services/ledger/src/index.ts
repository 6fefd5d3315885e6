// The ledger service as a library: for the all-in-one process and for tests.
export { DEFAULT_ENTITY_CACHE_SIZE, readLedgerConfig, type LedgerConfig } from "./config.js";
export { startLedger, type LedgerHandle } from "./start.js";
export { createAccount, type NewAccount } from "./identity.js";
// The RPC handlers alone, for tests that run them in memory without a database (@ledger/e2e's startHandlers).
export {
  default as ledgerRpcRoutes,
  INTERNAL_METHODS as LEDGER_INTERNAL_METHODS,
  PUBLIC_METHODS as LEDGER_PUBLIC_METHODS,
} from "./routes.js";
