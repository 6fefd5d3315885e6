// The notification service as a library: for the all-in-one process and for tests.
export { readNotificationConfig, parseRetrySchedule, type NotificationConfig } from "./config.js";
export { startNotification, type NotificationHandle } from "./start.js";
// The RPC handlers alone, for tests that run them in memory without a database (@ledger/e2e's startHandlers).
export { default as notificationRpcRoutes } from "./routes.js";
