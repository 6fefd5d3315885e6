import { runMain } from "@ledger/common";
import { readGatewayConfig } from "./config.js";
import { startGateway } from "./start.js";

// Runs the gateway on its own, as in Kubernetes.
runMain("gateway", async () => startGateway(readGatewayConfig()));
