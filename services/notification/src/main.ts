import { runMain } from "@ledger/common";
import { readNotificationConfig } from "./config.js";
import { startNotification } from "./start.js";

// Runs the notification service on its own, as in Kubernetes.
runMain("notification", async () => startNotification(readNotificationConfig()));
