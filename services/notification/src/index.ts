// The notification service as a library: for the all-in-one process and for tests.
export { readNotificationConfig, parseRetrySchedule, type NotificationConfig } from "./config.js";
export { startNotification, type NotificationHandle } from "./start.js";
