import { randomUUID } from "node:crypto";
import * as http from "node:http";
import * as http2 from "node:http2";
import * as net from "node:net";
import { createContextKey, createContextValues, type ConnectRouter, type ContextValues, type Interceptor } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { createUnaryFastPath, inProcessService, type UnaryFastPath } from "@ledger/connect-fast";
import type { Logger } from "pino";
import { DEFAULT_HEADER_TIMEOUT_MS, DEFAULT_IDLE_TIMEOUT_MS, DEFAULT_RPC_BODY_LIMIT_BYTES } from "./config.js";
import { addDiscovery } from "./discovery.js";
import { isGrpcRequest, specGrpcMessageOn } from "./grpc-message.js";
import type { InProcessService } from "./in-process.js";
import { metricsRegistry } from "./metrics.js";

/** Checks a dependency for /readyz; resolves true when it is reachable. */
export type ReadinessCheck = () => Promise<boolean>;

type NodeRequest = http.IncomingMessage | http2.Http2ServerRequest;
type NodeResponse = http.ServerResponse | http2.Http2ServerResponse;
/** A plain HTTP handler; one that returns a promise has it watched by `listen`'s last-resort handler. */
type NodeHandler = (req: NodeRequest, res: NodeResponse) => void | Promise<void>;

/** The error envelope and its headers, for what a port answers itself rather than through a handler. */
function errorAnswer(code: string, message: string): { body: string; headers: http.OutgoingHttpHeaders } {
  const body = JSON.stringify({ status: "error", error: { code, message } });
  return { body, headers: { "content-type": "application/json", "content-length": Buffer.byteLength(body), "cache-control": "no-store" } };
}

/** Writes the error envelope on a response. */
function sendError(res: NodeResponse, status: number, code: string, message: string): void {
  const { body, headers } = errorAnswer(code, message);
  (res as http.ServerResponse).writeHead(status, headers);
  (res as http.ServerResponse).end(body);
}

/** How a request's answer is ended after a bug, whatever carries it: a response, or an HTTP/2 stream. */
interface FailedAnswer {
  /** The answer was already sent whole. */
  ended: boolean;
  /** Its status and headers were sent: only cutting it is left. */
  begun: boolean;
  cut(): void;
  sendError(status: number, code: string, message: string): void;
}

/**
 * A bug met by one request: logged with a request id, and the request answered 500 in the
 * envelope naming that id (or cut, when its answer has begun).
 */
function failRequest(log: Logger, err: unknown, method: string | undefined, url: string | undefined, answer: FailedAnswer): void {
  const requestId = randomUUID();
  log.error({ err, request_id: requestId, method, path: (url ?? "").split("?")[0] }, "request handler failed");
  if (answer.ended) return;
  try {
    if (answer.begun) answer.cut();
    else answer.sendError(500, "internal", `internal error; the request id is ${requestId}`);
  } catch {
    // The answer is in a state nothing can be written in; the stream or connection is all that is left to end.
    answer.cut();
  }
}

/**
 * The URL a request asks for, or undefined when its target and Host do not make one: a target
 * the URL parser refuses (`//%`, `//[`), a Host that is no host, or none at all (HTTP/1.0). That
 * is the client's mistake: `listen` answers it 400 before any handler sees it, so handlers (and
 * Connect, which builds the same URL) may parse it without a try.
 */
export function requestUrl(req: NodeRequest): URL | undefined {
  const authority = "authority" in req ? req.authority : req.headers.host;
  if (!authority) return undefined;
  try {
    return new URL(req.url ?? "/", `http://${authority}`);
  } catch {
    return undefined;
  }
}

/**
 * Runs `handler` so that nothing it throws or rejects with escapes: a bug met by one request is
 * logged and answers that request 500 (or cuts it, when its answer has begun), and the process
 * goes on serving everyone else.
 */
function lastResort(handler: NodeHandler, log: Logger): NodeHandler {
  return (req, res) => {
    const fail = (err: unknown) =>
      failRequest(log, err, req.method, req.url, {
        ended: res.writableEnded,
        begun: res.headersSent,
        cut: () => ("stream" in res ? res.stream.close(http2.constants.NGHTTP2_INTERNAL_ERROR) : res.destroy()),
        sendError: (status, code, message) => sendError(res, status, code, message),
      });
    try {
      handler(req, res)?.catch(fail);
    } catch (err) {
      fail(err);
    }
  };
}

/** Whether `authority` makes a URL with any path: what `requestUrl` asks of a request's authority. */
function validHost(authority: string): boolean {
  try {
    new URL(`http://${authority}/`);
    return true;
  } catch {
    return false;
  }
}

/** `failRequest` for a request served on node's HTTP/2 stream itself (the unary fast path's, @ledger/connect-fast). */
function failStream(stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders, err: unknown, log: Logger): void {
  failRequest(log, err, headers[":method"], headers[":path"], {
    ended: stream.destroyed || stream.closed,
    begun: stream.headersSent,
    cut: () => stream.close(http2.constants.NGHTTP2_INTERNAL_ERROR),
    sendError: (status, code, message) => {
      const { body, headers } = errorAnswer(code, message);
      stream.respond({ ":status": status, ...headers });
      stream.end(body);
    },
  });
}

/**
 * Node's compatibility request and response for an HTTP/2 stream, built and checked as node builds
 * them for a server's request listener (which this server does not have: the fast path takes
 * its streams first): CONNECT is refused 405, an expectation other than 100-continue 417.
 */
function compatRequest(
  stream: http2.ServerHttp2Stream,
  headers: http2.IncomingHttpHeaders,
  rawHeaders: string[],
  handler: NodeHandler,
): void {
  // connect-node encodes a gRPC error's message for Connect's clients, not grpc-js (grpc-message.ts).
  if (isGrpcRequest(headers)) specGrpcMessageOn(stream);
  const req = new http2.Http2ServerRequest(stream, headers, {}, rawHeaders);
  const res = new http2.Http2ServerResponse(stream);
  if (headers[":method"] === "CONNECT") {
    res.statusCode = http2.constants.HTTP_STATUS_METHOD_NOT_ALLOWED;
    res.end();
    return;
  }
  if (headers.expect !== undefined) {
    if (headers.expect !== "100-continue") {
      res.statusCode = http2.constants.HTTP_STATUS_EXPECTATION_FAILED;
      res.end();
      return;
    }
    res.writeContinue();
  }
  handler(req, res);
}

/** Answers /healthz only: the process is up. Returns false for any other path. */
function serveHealthz(req: NodeRequest, res: NodeResponse): boolean {
  if ((req.url ?? "/").split("?")[0] !== "/healthz") return false;
  (res as http.ServerResponse).writeHead(200, { "content-type": "application/json", "cache-control": "no-store" });
  (res as http.ServerResponse).end(JSON.stringify({ status: "ok" }));
  return true;
}

/**
 * Answers /healthz, /readyz and /metrics. Returns false for any other path, so the caller can
 * serve it. Readiness lists each check by name, so an operator sees which dependency is down.
 */
export function serveOpsEndpoint(req: NodeRequest, res: NodeResponse, checks: Record<string, ReadinessCheck>): boolean {
  const path = (req.url ?? "/").split("?")[0];
  const reply = (status: number, type: string, body: string) => {
    (res as http.ServerResponse).writeHead(status, { "content-type": type, "cache-control": "no-store" });
    (res as http.ServerResponse).end(body);
  };
  if (serveHealthz(req, res)) return true;
  if (path === "/readyz") {
    void checkReadiness(checks).then(({ ready, detail }) =>
      reply(ready ? 200 : 503, "application/json", JSON.stringify({ status: ready ? "ok" : "unavailable", checks: detail })),
    );
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

/** Runs every readiness check at once (2 s each at most): ready when all pass, and each one's result by name. */
export async function checkReadiness(
  checks: Record<string, ReadinessCheck>,
): Promise<{ ready: boolean; detail: Record<string, "ok" | "unavailable"> }> {
  const names = Object.keys(checks);
  const results = await Promise.all(names.map((name) => withTimeout(checks[name]!(), 2_000).catch(() => false)));
  const detail = Object.fromEntries(names.map((name, i) => [name, results[i] ? ("ok" as const) : ("unavailable" as const)]));
  return { ready: results.every(Boolean), detail };
}

/**
 * Readiness for the gRPC health protocol: the same checks as /readyz, run at most once a second
 * however many health calls arrive (they are open to anyone), concurrent calls sharing one run.
 */
function sharedReadiness(checks: Record<string, ReadinessCheck>): () => Promise<boolean> {
  let last: { at: number; ready: Promise<boolean> } | undefined;
  return () => {
    const now = performance.now();
    if (!last || now - last.at >= 1_000) last = { at: now, ready: checkReadiness(checks).then((r) => r.ready) };
    return last.ready;
  };
}

function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("timeout")), ms);
    promise.then(
      (value) => {
        clearTimeout(timer);
        resolve(value);
      },
      (err: unknown) => {
        clearTimeout(timer);
        reject(err);
      },
    );
  });
}

const peerAddressKey = createContextKey<string | undefined>(undefined, { description: "peer address" });

/** The address an RPC came from (the TCP peer: a proxy's, behind one), for limits on callers without a key. */
export function peerAddressOf(values: ContextValues): string | undefined {
  return values.get(peerAddressKey);
}

/** What `listen` needs to serve a service. */
export interface ServeOptions {
  /** Name for logs. */
  name: string;
  host: string;
  /** 0 picks a free port; read it back from the result. */
  port: number;
  log: Logger;
  /**
   * Connect routes; omitted for a process that serves only plain HTTP (the gateway). The port
   * also serves gRPC health (from `readiness`) and server reflection of these routes (discovery.ts).
   */
  routes?: (router: ConnectRouter) => void;
  interceptors?: Interceptor[];
  /**
   * Largest RPC request body (RPC_BODY_LIMIT_BYTES). Connect refuses a larger one with
   * resource_exhausted as soon as its declared length or the bytes read so far pass it, before
   * any interceptor (authentication included) runs.
   */
  rpcBodyLimitBytes?: number;
  /**
   * Serve unary binary Connect calls over HTTP/2 without connect-node's universal layer, and calls
   * in this process without Connect's router (@ledger/connect-fast); every other request goes to
   * connect-node. False: every request is connect-node's, and `inProcess` is Connect's router
   * transport. Unset: RPC_UNARY_FAST_PATH decides (on unless it says false).
   */
  unaryFastPath?: boolean | undefined;
  /** Plain HTTP requests that are neither RPC nor ops endpoints. */
  fallback?: NodeHandler;
  readiness: Record<string, ReadinessCheck>;
  /**
   * Which ops endpoints this port answers: all of /healthz, /readyz and /metrics (the default),
   * or only /healthz, for a public port whose metrics and readiness live on a separate ops port
   * (the gateway's GATEWAY_OPS_PORT); there /readyz and /metrics go to `fallback` like any path.
   */
  opsEndpoints?: "all" | "healthz";
  /**
   * A new connection that has not sent a request's complete headers by then is closed
   * (HTTP_HEADER_TIMEOUT_MS); as are an HTTP/1.1 connection whose next request's headers do not
   * come within `idleTimeoutMs` of its last answer, and an HTTP/2 session with no open stream for
   * `idleTimeoutMs` (HTTP_IDLE_TIMEOUT_MS), whatever PINGs or SETTINGS it sends meanwhile.
   */
  headerTimeoutMs?: number | undefined;
  idleTimeoutMs?: number | undefined;
}

/** A listening server; `close` drains it. */
export interface RunningServer {
  port: number;
  url: string;
  /**
   * The same RPC routes behind the same interceptors, for callers in this process (`npm start`):
   * pass it where a caller takes a ServiceTarget. Absent on a port without routes (the gateway's).
   */
  inProcess?: InProcessService;
  close(): Promise<void>;
}

const HTTP2_PREFACE = Buffer.from("PRI * HTTP/2.0");

/** One connection's deadline: `set` (re)arms it, `clear` disarms it; when it passes, `expire` runs. */
function deadline(expire: () => void): { set(ms: number): void; clear(): void } {
  let timer: NodeJS.Timeout | undefined;
  return {
    set(ms) {
      clearTimeout(timer);
      timer = setTimeout(expire, ms);
      // A connection's deadline alone must not keep a process alive: its socket does, while it is open.
      timer.unref();
    },
    clear() {
      clearTimeout(timer);
      timer = undefined;
    },
  };
}

/**
 * What answers a request: the unary fast path for HTTP/2 streams it serves, and for the rest the
 * ops endpoints, Connect's adapter of the routes, or the fallback.
 */
function requestHandlers(options: ServeOptions, readMaxBytes: number, stopping: AbortSignal) {
  const notFound: NodeHandler = (_req, res) => sendError(res, 404, "not_found", "no such path");
  // Guarded on its own too: the RPC adapter calls it and drops whatever it returns.
  const fallback = lastResort(options.fallback ?? notFound, options.log);
  const routes = options.routes;
  const peerValues = (address: string | undefined) => createContextValues().set(peerAddressKey, address);
  const contextValues = (req: NodeRequest) =>
    peerValues("stream" in req ? req.stream.session?.socket.remoteAddress : req.socket.remoteAddress);
  const fastPath = routes
    ? createUnaryFastPath({
        routes,
        interceptors: options.interceptors ?? [],
        readMaxBytes,
        contextValues: (stream) => peerValues(stream.session?.socket.remoteAddress),
        shutdownSignal: stopping,
        unaryFastPath: options.unaryFastPath,
      })
    : undefined;
  const rpc = routes
    ? connectNodeAdapter({
        routes: (router) => {
          routes(router);
          addDiscovery(router, sharedReadiness(options.readiness), stopping);
        },
        interceptors: options.interceptors ?? [],
        readMaxBytes,
        contextValues,
        fallback: (req, res) => fallback(req as http.IncomingMessage, res as unknown as http.ServerResponse),
      })
    : undefined;
  const handler = lastResort((req, res) => {
    if (!requestUrl(req)) return sendError(res, 400, "invalid_request", "the request target or its Host header is not valid");
    if (options.opsEndpoints === "healthz" ? serveHealthz(req, res) : serveOpsEndpoint(req, res, options.readiness)) return;
    return rpc ? rpc(req, res) : fallback(req, res);
  }, options.log);

  return { handler, fastPath };
}

/**
 * HTTP/2 streams go to the unary fast path as they are; the rest get node's compatibility request
 * and response, as a server given `handler` would build them. `sessions` are the open ones.
 */
function http2Server(handler: NodeHandler, fastPath: UnaryFastPath | undefined, idleTimeoutMs: number, log: Logger) {
  const h2 = http2.createServer({});
  let validAuthority: string | undefined;
  h2.on("stream", (stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders, _flags: number, rawHeaders: string[]) => {
    const authority = headers[":authority"] || headers.host;
    // The fast path's paths are all valid, so its URL is valid when its authority is. Each
    // connection sends the same one on every call: checked once, not parsed per call.
    if (fastPath && authority !== undefined && (authority === validAuthority || validHost(authority))) {
      validAuthority = authority;
      const served = fastPath(stream, headers);
      if (served) return void served.catch((err: unknown) => failStream(stream, headers, err, log));
    }
    compatRequest(stream, headers, rawHeaders, handler);
  });
  const sessions = new Set<http2.Http2Session>();
  h2.on("session", (session: http2.ServerHttp2Session) => {
    sessions.add(session);
    // Idle while no stream is open: a session that opens none (only its preface and SETTINGS, or
    // PINGs) is closed, and so is a client's kept-alive session once its calls are over; callers
    // of ours open a new one for their next call (@ledger/connect-fast). An open stream (a long
    // server stream included) keeps the session, however quiet.
    const idle = deadline(() => session.close());
    let open = 0;
    idle.set(idleTimeoutMs);
    session.on("stream", (stream: http2.ServerHttp2Stream) => {
      open++;
      idle.clear();
      stream.once("close", () => {
        if (--open === 0 && !session.closed) idle.set(idleTimeoutMs);
      });
    });
    session.once("close", () => {
      idle.clear();
      sessions.delete(session);
    });
  });
  return { server: h2, sessions };
}

/**
 * HTTP/1.1 keep-alive sockets: how many requests each is serving, so a drain can close the idle
 * ones at once and the busy ones as soon as their response is written, and each one's deadline:
 * its first request's headers within the header timeout, each next one's within the idle timeout
 * of the last answer.
 */
class Http1Server {
  // node's own headersTimeout and requestTimeout do nothing here: node checks them only for
  // connections of a server that listens itself, and this one is handed its sockets. `deadline`s
  // do it instead. keepAliveTimeout still tells clients, in a Keep-Alive header, how long an idle
  // connection is kept.
  readonly server: http.Server;
  private readonly connections = new Map<net.Socket, { busy: number; deadline: ReturnType<typeof deadline> }>();
  /** Set when the server closes: answers say `connection: close`, and a socket ends with its last answer. */
  draining = false;

  constructor(handler: NodeHandler, idleTimeoutMs: number) {
    this.server = http.createServer({ keepAliveTimeout: idleTimeoutMs }, handler as http.RequestListener);
    this.server.on("request", (req: http.IncomingMessage, res: http.ServerResponse) => {
      const connection = this.connections.get(req.socket);
      if (!connection) return;
      connection.busy++;
      connection.deadline.clear();
      if (this.draining) res.setHeader("connection", "close");
      res.once("close", () => {
        if (--connection.busy > 0) return;
        if (this.draining) req.socket.destroy();
        else connection.deadline.set(idleTimeoutMs);
      });
    });
  }

  /** Takes a socket whose first bytes are not HTTP/2's; `headers` is its deadline until then. */
  accept(socket: net.Socket, headers: ReturnType<typeof deadline>): void {
    this.connections.set(socket, { busy: 0, deadline: headers });
    socket.once("close", () => this.connections.delete(socket));
    this.server.emit("connection", socket);
    socket.resume();
  }

  /** Closes every connection that is not serving a request. */
  closeIdle(): void {
    for (const [socket, { busy }] of this.connections) if (busy === 0) socket.destroy();
  }
}

/** The port's server: each connection goes to HTTP/2 or HTTP/1.1 by its first bytes; `sockets` are the open ones. */
function sniffingServer(h1: Http1Server, h2: http2.Http2Server, headerTimeoutMs: number, sockets: Set<net.Socket>): net.Server {
  // No Nagle: RPC answers are small writes, and waiting for an ACK before sending them cost
  // about 40 ms per call (the peer delays its ACK), which made every request take ~50 ms.
  return net.createServer({ noDelay: true }, (socket) => {
    socket.setNoDelay(true);
    sockets.add(socket);
    // A connection that sends nothing, or not a whole request's headers, is closed: until its
    // first bytes say which protocol it speaks, then (HTTP/1.1) until its first request arrives.
    const headers = deadline(() => socket.destroy());
    headers.set(headerTimeoutMs);
    socket.once("close", () => {
      headers.clear();
      sockets.delete(socket);
    });
    socket.once("data", (first) => {
      socket.pause();
      socket.unshift(first);
      if (first.subarray(0, HTTP2_PREFACE.length).equals(HTTP2_PREFACE)) {
        // From here the session's idle deadline applies (http2Server's "session" listener).
        headers.clear();
        // The HTTP/2 session reads the socket natively and, on its first tick, takes in what is
        // already buffered (the bytes unshifted here). The socket must stay paused: resuming it
        // would emit those bytes to no listener and lose them.
        h2.emit("connection", socket);
      } else {
        h1.accept(socket, headers);
      }
    });
    socket.on("error", () => socket.destroy());
  });
}

/**
 * Serves HTTP/1.1 and cleartext HTTP/2 on one port by looking at the first bytes of each
 * connection. RPC clients get HTTP/2 (gRPC needs it; Connect is faster with it) while
 * Kubernetes probes, curl and Prometheus keep plain HTTP/1.1.
 */
export async function listen(options: ServeOptions): Promise<RunningServer> {
  // Ends what would otherwise hold a drain open: health Watch streams.
  const stopping = new AbortController();
  const routes = options.routes;
  const readMaxBytes = options.rpcBodyLimitBytes ?? DEFAULT_RPC_BODY_LIMIT_BYTES;
  const { handler, fastPath } = requestHandlers(options, readMaxBytes, stopping.signal);
  const headerTimeoutMs = options.headerTimeoutMs ?? DEFAULT_HEADER_TIMEOUT_MS;
  const idleTimeoutMs = options.idleTimeoutMs ?? DEFAULT_IDLE_TIMEOUT_MS;
  const h2 = http2Server(handler, fastPath, idleTimeoutMs, options.log);
  const h1 = new Http1Server(handler, idleTimeoutMs);
  const sockets = new Set<net.Socket>();
  const server = sniffingServer(h1, h2.server, headerTimeoutMs, sockets);
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port, options.host, () => resolve());
  });
  const address = server.address() as net.AddressInfo;
  const inProcess = routes
    ? inProcessService({
        name: options.name,
        routes,
        interceptors: options.interceptors ?? [],
        readMaxBytes,
        unaryFastPath: options.unaryFastPath,
      })
    : undefined;
  const host = options.host === "0.0.0.0" || options.host === "::" ? "127.0.0.1" : options.host;
  options.log.info({ port: address.port }, `${options.name} listening`);
  return {
    port: address.port,
    url: `http://${host}:${address.port}`,
    ...(inProcess ? { inProcess } : {}),
    async close() {
      // Stop accepting, let in-flight requests finish, then cut what is left after a grace period.
      h1.draining = true;
      stopping.abort();
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      h1.closeIdle();
      for (const session of h2.sessions) session.close();
      const grace = setTimeout(() => {
        for (const socket of sockets) socket.destroy();
      }, 10_000);
      grace.unref();
      await closed;
      clearTimeout(grace);
    },
  };
}
