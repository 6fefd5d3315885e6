// The hold service as a library: for the all-in-one process and for tests.
export { readHoldConfig, type HoldConfig } from "./config.js";
export { startHold, type HoldHandle } from "./start.js";
