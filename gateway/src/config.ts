import { readCorsOrigins } from "./cors.js";
import {
  envInt,
  envString,
  envUrl,
  readConnectionTimeouts,
  readRateLimitConfig,
  readTracingConfig,
  type ConnectionTimeouts,
  type RateLimitConfig,
  type TracingConfig,
} from "@ledger/common";

/** GATEWAY_CALL_TIMEOUT_MS unless set: far above any answer a healthy service gives (a batch of 1,000 takes about a second). */
export const DEFAULT_CALL_TIMEOUT_MS = 30_000;

/**
 * GATEWAY_BODY_BUDGET_BYTES unless set: eight bodies of the batch limit, or 32 of the usual one,
 * read at once; typical bodies are a few KB, so thousands. What a body costs in memory once read
 * and parsed is a few times its size, so this keeps a flood of large bodies to a bounded share of
 * the process's memory.
 */
const DEFAULT_BODY_BUDGET_BYTES = 32 * 1024 * 1024;

/** The body budget unless one is set: the default, or the largest body a request may have if that is more. */
export function defaultBodyBudget(config: Pick<GatewayConfig, "bodyLimitBytes" | "batchBodyLimitBytes">): number {
  return Math.max(DEFAULT_BODY_BUDGET_BYTES, config.bodyLimitBytes, config.batchBodyLimitBytes);
}

/** Configuration of the REST gateway, read once at start. */
export interface GatewayConfig extends RateLimitConfig, ConnectionTimeouts {
  host: string;
  /** The public port: the REST API, its docs and /healthz. */
  port: number;
  /**
   * The ops port (GATEWAY_OPS_PORT): /metrics, /readyz and /healthz, on the same host. Kept apart
   * so that what an Ingress exposes never includes the metrics; 0 picks a free port.
   */
  opsPort: number;
  /** Base URL of the ledger service's RPC server. */
  ledgerUrl: string;
  /** Base URL of the hold service's RPC server. */
  holdUrl: string;
  /** Base URL of the notification service's RPC server (webhooks and events). */
  notificationUrl: string;
  /** Largest request body accepted; larger ones answer 413. */
  bodyLimitBytes: number;
  /** Largest body of POST /v1/transaction/batch (1,000 items with room for metadata); larger ones answer 413. */
  batchBodyLimitBytes: number;
  /**
   * Bytes of request bodies the process reads at once, over all requests (GATEWAY_BODY_BUDGET_BYTES);
   * a body that would go over it answers 503 with Retry-After before it is read. Undefined,
   * `defaultBodyBudget`.
   */
  bodyBudgetBytes?: number | undefined;
  /**
   * How long the gateway waits for a service's answer (GATEWAY_CALL_TIMEOUT_MS), sent to the
   * service as the call's deadline; past it the client gets 503 `unavailable` instead of a request
   * that hangs while the service does. Unset in tests that build a config by hand: no deadline.
   */
  callTimeoutMs?: number | undefined;
  logLevel: string;
  /** OpenTelemetry tracing; undefined (the default) leaves it off. */
  tracing?: TracingConfig | undefined;
  /** Browser origins allowed to call /v1 (GATEWAY_CORS_ORIGINS); empty, the default, sends no CORS header. */
  corsOrigins?: string[] | undefined;
}

/** Reads and validates the gateway's configuration. */
export function readGatewayConfig(env: Record<string, string | undefined> = process.env): GatewayConfig {
  const bodyLimitBytes = envInt(env, "GATEWAY_BODY_LIMIT_BYTES", 1024 * 1024, 1024, 64 * 1024 * 1024);
  const batchBodyLimitBytes = envInt(env, "GATEWAY_BATCH_BODY_LIMIT_BYTES", 4 * 1024 * 1024, 1024, 64 * 1024 * 1024);
  return {
    host: envString(env, "GATEWAY_HOST", "0.0.0.0"),
    port: envInt(env, "PORT", 8080, 0, 65535),
    opsPort: envInt(env, "GATEWAY_OPS_PORT", 9090, 0, 65535),
    ledgerUrl: envUrl(env, "LEDGER_URL", "http://127.0.0.1:8081", ["http", "https"]),
    holdUrl: envUrl(env, "HOLD_URL", "http://127.0.0.1:8082", ["http", "https"]),
    notificationUrl: envUrl(env, "NOTIFICATION_URL", "http://127.0.0.1:8083", ["http", "https"]),
    bodyLimitBytes,
    batchBodyLimitBytes,
    // Never below the largest body a request may have: that body could never be read.
    bodyBudgetBytes: envInt(
      env,
      "GATEWAY_BODY_BUDGET_BYTES",
      defaultBodyBudget({ bodyLimitBytes, batchBodyLimitBytes }),
      Math.max(bodyLimitBytes, batchBodyLimitBytes),
      2 ** 32,
    ),
    callTimeoutMs: envInt(env, "GATEWAY_CALL_TIMEOUT_MS", DEFAULT_CALL_TIMEOUT_MS, 100, 600_000),
    ...readRateLimitConfig(env),
    ...readConnectionTimeouts(env),
    logLevel: envString(env, "LOG_LEVEL", "info"),
    tracing: readTracingConfig(env),
    corsOrigins: readCorsOrigins(env),
  };
}
