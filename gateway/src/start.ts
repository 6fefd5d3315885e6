import { createClient } from "@connectrpc/connect";
import {
  cachedAuthenticator,
  ledgerAuthenticator,
  listen,
  openProcess,
  rateLimiterOf,
  rpcTransport,
  targetIsUp,
  traceClientInterceptor,
  type InProcessService,
  type RunningServer,
  type Tracing,
} from "@ledger/common";
import { HoldService } from "@ledger/proto/hold/v1/hold_pb.js";
import { LedgerService } from "@ledger/proto/ledger/v1/ledger_pb.js";
import { NotificationService } from "@ledger/proto/notification/v1/notification_pb.js";
import { defaultBodyBudget, type GatewayConfig } from "./config.js";
import { createConsoleHandler } from "./console.js";
import { createCors } from "./cors.js";
import { createDocsHandler } from "./docs.js";
import { holdRoutes } from "./hold-routes.js";
import { notificationRoutes } from "./notification-routes.js";
import { ledgerRoutes, type Clients } from "./routes.js";
import { createRestHandler } from "./server.js";

/** A running gateway. */
export interface GatewayHandle {
  /** The public port: REST, docs and /healthz. */
  server: RunningServer;
  /** The ops port: /metrics, /readyz and /healthz, for probes and Prometheus, never for an Ingress. */
  ops: RunningServer;
  /** Present when tracing is configured. */
  tracing: Tracing | undefined;
  close(): Promise<void>;
}

/** The services a gateway reaches in memory because they run in its process (`npm start`). */
export interface GatewayPeers {
  ledger?: InProcessService;
  hold?: InProcessService;
  notification?: InProcessService;
}

/**
 * Starts the REST gateway. It speaks Connect with binary protobuf over one HTTP/2 connection
 * per service, kept alive, so a REST call costs one multiplexed stream, not a new connection;
 * a service in `peers` runs in this process and is called in memory instead of at its URL.
 */
export async function startGateway(config: GatewayConfig, peers: GatewayPeers = {}): Promise<GatewayHandle> {
  const { log, tracing, lifecycle } = await openProcess("gateway", config);
  return lifecycle.starting(async () => {
    const interceptors = tracing ? [traceClientInterceptor(tracing)] : [];
    const targets = {
      ledger: peers.ledger ?? config.ledgerUrl,
      hold: peers.hold ?? config.holdUrl,
      notification: peers.notification ?? config.notificationUrl,
    };
    const clients: Clients = {
      ledger: createClient(LedgerService, rpcTransport(targets.ledger, interceptors)),
      hold: createClient(HoldService, rpcTransport(targets.hold, interceptors)),
      notification: createClient(NotificationService, rpcTransport(targets.notification, interceptors)),
    };
    // The notification service is not a readiness check: money endpoints stay up while it is down,
    // and its own paths answer 503 until it is back.
    const routes = [...ledgerRoutes, ...holdRoutes, ...notificationRoutes];
    const rateLimiter = rateLimiterOf(config);
    const handler = createRestHandler(routes, clients, {
      bodyLimitBytes: config.bodyLimitBytes,
      batchBodyLimitBytes: config.batchBodyLimitBytes,
      bodyBudgetBytes: config.bodyBudgetBytes ?? defaultBodyBudget(config),
      // The ledger owns identity; a key is trusted for AUTH_CACHE_TTL_MS here, as in every service.
      authenticate: cachedAuthenticator(ledgerAuthenticator(targets.ledger)),
      callTimeoutMs: config.callTimeoutMs,
      log,
      tracing,
      ...(rateLimiter ? { rateLimiter } : {}),
    });
    // The docs and the webhook console come first: they need no API key and do not count against
    // a key's rate limit.
    const pages = [await createDocsHandler(), createConsoleHandler()];
    const methodsByPath = new Map<string, string[]>([["/openapi.json", ["GET"]]]);
    for (const route of routes) methodsByPath.set(route.path, [...(methodsByPath.get(route.path) ?? []), route.method]);
    const cors = createCors(config.corsOrigins ?? [], (path) => methodsByPath.get(path));
    // The ops port first: probes and Prometheus find it as soon as the process is up. It is not
    // ready until the public port listens too: a public port that cannot be had ends the process,
    // which must not have been counted ready in between.
    let publicPortListening = false;
    const connectionTimeouts = { headerTimeoutMs: config.headerTimeoutMs, idleTimeoutMs: config.idleTimeoutMs };
    const ops = await listen({
      name: "gateway ops",
      host: config.host,
      port: config.opsPort,
      log,
      ...connectionTimeouts,
      readiness: {
        ledger: targetIsUp(targets.ledger),
        hold: targetIsUp(targets.hold),
        public_port: async () => publicPortListening,
      },
    });
    lifecycle.onClose("ops port", () => ops.close());
    // The public port keeps /healthz (an outside load balancer may check it; it says only "up"),
    // while /metrics and /readyz, which name internals, answer 404 there like any unknown path.
    const server = await listen({
      name: "gateway",
      host: config.host,
      port: config.port,
      log,
      ...connectionTimeouts,
      opsEndpoints: "healthz",
      fallback: (req, res) => {
        // Returned, so that listen's last-resort handler sees the request fail if it ever does.
        if (cors?.(req as never, res as never)) return undefined;
        return pages.some((page) => page(req as never, res as never)) ? undefined : handler(req as never, res as never);
      },
      readiness: {},
    });
    publicPortListening = true;
    lifecycle.onClose("public port", () => server.close());
    return { server, ops, tracing, close: () => lifecycle.close() };
  });
}
