import { envInt, envString, envUrl, readTracingConfig, type TracingConfig } from "@ledger/common";

/** Configuration of the REST gateway, read once at start. */
export interface GatewayConfig {
  host: string;
  port: number;
  /** Base URL of the ledger service's RPC server. */
  ledgerUrl: string;
  /** Base URL of the hold service's RPC server. */
  holdUrl: string;
  /** Base URL of the notification service's RPC server (webhooks and events). */
  notificationUrl: string;
  /** Largest request body accepted; larger ones answer 413. */
  bodyLimitBytes: number;
  /** Requests per second per API key on average (0: no limit); over it, 429 with Retry-After. */
  rateLimitPerSecond: number;
  /** Requests a key may send at once above the average. */
  rateLimitBurst: number;
  logLevel: string;
  /** OpenTelemetry tracing; undefined (the default) leaves it off. */
  tracing?: TracingConfig | undefined;
}

/** Reads and validates the gateway's configuration. */
export function readGatewayConfig(env: Record<string, string | undefined> = process.env): GatewayConfig {
  return {
    host: envString(env, "GATEWAY_HOST", "0.0.0.0"),
    port: envInt(env, "PORT", 8080, 0, 65535),
    ledgerUrl: envUrl(env, "LEDGER_URL", "http://127.0.0.1:8081", ["http", "https"]),
    holdUrl: envUrl(env, "HOLD_URL", "http://127.0.0.1:8082", ["http", "https"]),
    notificationUrl: envUrl(env, "NOTIFICATION_URL", "http://127.0.0.1:8083", ["http", "https"]),
    bodyLimitBytes: envInt(env, "GATEWAY_BODY_LIMIT_BYTES", 1024 * 1024, 1024, 64 * 1024 * 1024),
    rateLimitPerSecond: envInt(env, "GATEWAY_RATE_LIMIT_PER_SECOND", 1_000, 0, 1_000_000),
    rateLimitBurst: envInt(env, "GATEWAY_RATE_LIMIT_BURST", 2_000, 1, 10_000_000),
    logLevel: envString(env, "LOG_LEVEL", "info"),
    tracing: readTracingConfig(env),
  };
}
