// The gateway as a library: for the all-in-one process and for tests.
export { DEFAULT_CALL_TIMEOUT_MS, readGatewayConfig, type GatewayConfig } from "./config.js";
export { startGateway, type GatewayHandle, type GatewayPeers } from "./start.js";
