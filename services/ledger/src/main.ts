import { runMain } from "@ledger/common";
import { readLedgerConfig } from "./config.js";
import { startLedger } from "./start.js";

// Runs the ledger service on its own, as in Kubernetes.
runMain("ledger", async () => startLedger(readLedgerConfig()));
