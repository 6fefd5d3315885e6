// The gateway as a library: for the all-in-one process and for tests.
export { readGatewayConfig, type GatewayConfig } from "./config.js";
export { startGateway, type GatewayHandle, type GatewayPeers } from "./start.js";
