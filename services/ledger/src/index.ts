// The ledger service as a library: for the all-in-one process and for tests.
export { readLedgerConfig, type LedgerConfig } from "./config.js";
export { startLedger, type LedgerHandle } from "./start.js";
export { createAccount, type NewAccount } from "./identity.js";
