import { runMain } from "@ledger/common";
import { readHoldConfig } from "./config.js";
import { startHold } from "./start.js";

// Runs the hold service on its own, as in Kubernetes.
runMain("hold", async () => startHold(readHoldConfig()));
