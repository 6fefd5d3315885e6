// The hold service as a library: for the all-in-one process and for tests.
export { readHoldConfig, type HoldConfig } from "./config.js";
export { startHold, type HoldHandle } from "./start.js";
// The RPC handlers alone, for tests that run them in memory without a database (@ledger/e2e's startHandlers).
export { createHoldService } from "./hold-rpc.js";
