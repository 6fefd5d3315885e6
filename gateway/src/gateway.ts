import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { createLogger, listen, startTracing, traceClientInterceptor, type RunningServer, type Tracing } from "@ledger/common";
import { HoldService } from "@ledger/proto/hold/v1/hold_pb.js";
import { LedgerService } from "@ledger/proto/ledger/v1/ledger_pb.js";
import { NotificationService } from "@ledger/proto/notification/v1/notification_pb.js";
import type { GatewayConfig } from "./config.js";
import { createDocsHandler } from "./docs.js";
import { holdRoutes } from "./hold-routes.js";
import { createRateLimiter } from "./rate-limit.js";
import { notificationRoutes } from "./notification-routes.js";
import { ledgerRoutes, type Clients } from "./routes.js";
import { createRestHandler } from "./server.js";

/** A running gateway. */
export interface GatewayHandle {
  server: RunningServer;
  /** Present when tracing is configured. */
  tracing: Tracing | undefined;
  close(): Promise<void>;
}

/**
 * Starts the REST gateway. It speaks Connect with binary protobuf over one HTTP/2 connection
 * per service, kept alive, so a REST call costs one multiplexed stream, not a new connection.
 */
export async function startGateway(config: GatewayConfig): Promise<GatewayHandle> {
  const log = createLogger("gateway", config.logLevel);
  const tracing = await startTracing(config.tracing, "gateway");
  const interceptors = tracing ? [traceClientInterceptor(tracing)] : [];
  const transport = (baseUrl: string) => createConnectTransport({ baseUrl, httpVersion: "2", useBinaryFormat: true, pingIntervalMs: 30_000, interceptors });
  const clients: Clients = {
    ledger: createClient(LedgerService, transport(config.ledgerUrl)),
    hold: createClient(HoldService, transport(config.holdUrl)),
    notification: createClient(NotificationService, transport(config.notificationUrl)),
  };
  // The notification service is not a readiness check: money endpoints stay up while it is down,
  // and its own paths answer 503 until it is back.
  const routes = [...ledgerRoutes, ...holdRoutes, ...notificationRoutes];
  const rateLimiter =
    config.rateLimitPerSecond > 0 ? createRateLimiter({ perSecond: config.rateLimitPerSecond, burst: config.rateLimitBurst }) : undefined;
  const handler = createRestHandler(routes, clients, { bodyLimitBytes: config.bodyLimitBytes, log, tracing, ...(rateLimiter ? { rateLimiter } : {}) });
  // The docs come first: they need no API key and do not count against a key's rate limit.
  const docs = createDocsHandler();
  const server = await listen({
    name: "gateway",
    host: config.host,
    port: config.port,
    log,
    fallback: (req, res) => {
      if (!docs(req as never, res as never)) void handler(req as never, res as never);
    },
    readiness: {
      ledger: async () => (await fetch(new URL("/healthz", config.ledgerUrl), { signal: AbortSignal.timeout(1_500) })).ok,
      hold: async () => (await fetch(new URL("/healthz", config.holdUrl), { signal: AbortSignal.timeout(1_500) })).ok,
    },
  });
  return {
    server,
    tracing,
    async close() {
      await server.close();
      await tracing?.shutdown();
      log.info("gateway stopped");
    },
  };
}
