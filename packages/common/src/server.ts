import * as http from "node:http";
import * as http2 from "node:http2";
import * as net from "node:net";
import type { ConnectRouter, Interceptor } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import type { Logger } from "pino";
import { metricsRegistry } from "./metrics.js";

/** Checks a dependency for /readyz; resolves true when it is reachable. */
export type ReadinessCheck = () => Promise<boolean>;

type NodeHandler = (req: http.IncomingMessage | http2.Http2ServerRequest, res: http.ServerResponse | http2.Http2ServerResponse) => void;

/**
 * Answers /healthz, /readyz and /metrics. Returns false for any other path, so the caller can
 * serve it. Readiness lists each check by name, so an operator sees which dependency is down.
 */
export function serveOpsEndpoint(
  req: http.IncomingMessage | http2.Http2ServerRequest,
  res: http.ServerResponse | http2.Http2ServerResponse,
  checks: Record<string, ReadinessCheck>,
): boolean {
  const path = (req.url ?? "/").split("?")[0];
  const reply = (status: number, type: string, body: string) => {
    (res as http.ServerResponse).writeHead(status, { "content-type": type, "cache-control": "no-store" });
    (res as http.ServerResponse).end(body);
  };
  if (path === "/healthz") {
    reply(200, "application/json", JSON.stringify({ status: "ok" }));
    return true;
  }
  if (path === "/readyz") {
    void (async () => {
      const names = Object.keys(checks);
      const results = await Promise.all(names.map((name) => withTimeout(checks[name]!(), 2_000).catch(() => false)));
      const detail = Object.fromEntries(names.map((name, i) => [name, results[i] ? "ok" : "unavailable"]));
      const ready = results.every(Boolean);
      reply(ready ? 200 : 503, "application/json", JSON.stringify({ status: ready ? "ok" : "unavailable", checks: detail }));
    })();
    return true;
  }
  if (path === "/metrics") {
    void metricsRegistry.metrics().then(
      (text) => reply(200, metricsRegistry.contentType, text),
      () => reply(500, "text/plain", "metrics unavailable\n"),
    );
    return true;
  }
  return false;
}

function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("timeout")), ms);
    promise.then(
      (value) => (clearTimeout(timer), resolve(value)),
      (err: unknown) => (clearTimeout(timer), reject(err)),
    );
  });
}

/** What `listen` needs to serve a service. */
export interface ServeOptions {
  /** Name for logs. */
  name: string;
  host: string;
  /** 0 picks a free port; read it back from the result. */
  port: number;
  log: Logger;
  /** Connect routes; omitted for a process that serves only plain HTTP (the gateway). */
  routes?: (router: ConnectRouter) => void;
  interceptors?: Interceptor[];
  /** Plain HTTP requests that are neither RPC nor ops endpoints. */
  fallback?: NodeHandler;
  readiness: Record<string, ReadinessCheck>;
}

/** A listening server; `close` drains it. */
export interface RunningServer {
  port: number;
  url: string;
  close(): Promise<void>;
}

const HTTP2_PREFACE = Buffer.from("PRI * HTTP/2.0");

/**
 * Serves HTTP/1.1 and cleartext HTTP/2 on one port by looking at the first bytes of each
 * connection. RPC clients get HTTP/2 (gRPC needs it; Connect is faster with it) while
 * Kubernetes probes, curl and Prometheus keep plain HTTP/1.1.
 */
export async function listen(options: ServeOptions): Promise<RunningServer> {
  const notFound: NodeHandler = (_req, res) => {
    (res as http.ServerResponse).writeHead(404, { "content-type": "application/json" });
    (res as http.ServerResponse).end(JSON.stringify({ status: "error", error: { code: "not_found", message: "no such path" } }));
  };
  const fallback = options.fallback ?? notFound;
  const rpc = options.routes
    ? connectNodeAdapter({
        routes: options.routes,
        interceptors: options.interceptors ?? [],
        fallback: (req, res) => fallback(req as http.IncomingMessage, res as unknown as http.ServerResponse),
      })
    : undefined;
  const handler: NodeHandler = (req, res) => {
    if (serveOpsEndpoint(req, res, options.readiness)) return;
    if (rpc) rpc(req, res);
    else fallback(req, res);
  };

  const h1 = http.createServer({ keepAliveTimeout: 65_000 }, handler as http.RequestListener);
  const h2 = http2.createServer({}, handler as (req: http2.Http2ServerRequest, res: http2.Http2ServerResponse) => void);
  const sessions = new Set<http2.Http2Session>();
  h2.on("session", (session) => {
    sessions.add(session);
    session.once("close", () => sessions.delete(session));
  });
  // HTTP/1.1 keep-alive sockets and how many requests each is serving, so a drain can close the
  // idle ones at once and the busy ones as soon as their response is written.
  const h1Busy = new Map<net.Socket, number>();
  let draining = false;
  h1.on("request", (req: http.IncomingMessage, res: http.ServerResponse) => {
    const socket = req.socket;
    h1Busy.set(socket, (h1Busy.get(socket) ?? 0) + 1);
    if (draining) res.setHeader("connection", "close");
    res.once("close", () => {
      const left = (h1Busy.get(socket) ?? 1) - 1;
      h1Busy.set(socket, left);
      if (draining && left === 0) socket.destroy();
    });
  });
  const sockets = new Set<net.Socket>();
  // No Nagle: RPC answers are small writes, and waiting for an ACK before sending them cost
  // about 40 ms per call (the peer delays its ACK), which made every request take ~50 ms.
  const server = net.createServer({ noDelay: true }, (socket) => {
    socket.setNoDelay(true);
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
    socket.once("data", (first) => {
      socket.pause();
      socket.unshift(first);
      if (first.subarray(0, HTTP2_PREFACE.length).equals(HTTP2_PREFACE)) {
        // The HTTP/2 session reads the socket natively and, on its first tick, takes in what is
        // already buffered (the bytes unshifted here). The socket must stay paused: resuming it
        // would emit those bytes to no listener and lose them.
        h2.emit("connection", socket);
      } else {
        h1Busy.set(socket, 0);
        socket.once("close", () => h1Busy.delete(socket));
        h1.emit("connection", socket);
        socket.resume();
      }
    });
    socket.on("error", () => socket.destroy());
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port, options.host, () => resolve());
  });
  const address = server.address() as net.AddressInfo;
  const host = options.host === "0.0.0.0" || options.host === "::" ? "127.0.0.1" : options.host;
  options.log.info({ port: address.port }, `${options.name} listening`);
  return {
    port: address.port,
    url: `http://${host}:${address.port}`,
    async close() {
      // Stop accepting, let in-flight requests finish, then cut what is left after a grace period.
      draining = true;
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const [socket, busy] of h1Busy) if (busy === 0) socket.destroy();
      for (const session of sessions) session.close();
      const grace = setTimeout(() => {
        for (const socket of sockets) socket.destroy();
      }, 10_000);
      grace.unref();
      await closed;
      clearTimeout(grace);
    },
  };
}
