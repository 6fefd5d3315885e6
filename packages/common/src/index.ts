// The public surface of @ledger/common: only what two or more services share.
export * from "./config.js";
export * from "./db.js";
export * from "./errors.js";
export * from "./idempotency.js";
export * from "./ids.js";
export * from "./logger.js";
export * from "./metrics.js";
export * from "./nats.js";
export * from "./outbox.js";
export * from "./pagination.js";
export * from "./request-context.js";
export * from "./server.js";
export * from "./main.js";
export * from "./identity-client.js";
export * from "./wakeable-sleep.js";
export * from "./text.js";
export * from "./tracing.js";
