import { randomUUID } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { Code, type CallOptions } from "@connectrpc/connect";
import { Histogram } from "prom-client";
import {
  appError,
  continueTrace,
  IDEMPOTENCY_KEY_HEADER,
  IDEMPOTENT_REPLAYED_HEADER,
  incomingTrace,
  invalidArgument,
  metricsRegistry,
  rateKeyOf,
  rateLimited,
  recordFailure,
  REQUEST_ID_HEADER,
  requestUrl,
  SpanKind,
  startSpan,
  principalOfKey,
  type Authenticator,
  type Logger,
  type RateLimiter,
  type TraceLink,
  type TracedSpan,
  type Tracing,
  withActiveSpan,
} from "@ledger/common";
import { errorEnvelope } from "./errors.js";
import { createBodyBudget, methodNotAllowed, parseJsonBody, readBody, type BodyBudget } from "./http.js";
import { asObject, onlyKnown, parseQuery, type Fields } from "./input.js";
import { toJson } from "./json.js";
import type { Clients, Route } from "./routes.js";

const httpDuration = new Histogram({
  name: "http_server_duration_seconds",
  help: "REST requests by method, route and status: rate (count), errors (status) and latency.",
  labelNames: ["method", "route", "status"],
  buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
  registers: [metricsRegistry],
});

/** The version segment every REST path starts with (docs/api.md#endpoints). */
export const API_PREFIX = "/v1";

function send(res: ServerResponse, status: number, body: object, headers: Record<string, string> = {}) {
  const text = toJson(body);
  res.writeHead(status, { "content-type": "application/json; charset=utf-8", "content-length": Buffer.byteLength(text), ...headers });
  res.end(text);
}

function header(req: IncomingMessage, name: string): string | undefined {
  const value = req.headers[name];
  return Array.isArray(value) ? value[0] : value;
}

/** What `createRestHandler` is given besides its routes and clients. */
interface RestHandlerOptions {
  bodyLimitBytes: number;
  batchBodyLimitBytes?: number;
  /** Bytes of request bodies read at once over all requests (GATEWAY_BODY_BUDGET_BYTES). */
  bodyBudgetBytes: number;
  /** Resolves API keys (the ledger's IdentityService, cached), checked before a body is read. */
  authenticate: Authenticator;
  /** Every RPC's deadline; undefined, none. */
  callTimeoutMs?: number | undefined;
  log: Logger;
  rateLimiter?: RateLimiter;
  tracing?: Tracing | undefined;
}

/** What one REST handler answers every request with, made once when the handler is created. */
interface RestHandlerState {
  /** The routes by `<method> <path>`. */
  table: Map<string, Route>;
  /** The methods each path has a route for, to tell a wrong method from a wrong path. */
  methodsByPath: Map<string, string[]>;
  bodyBudget: BodyBudget;
  clients: Clients;
  options: RestHandlerOptions;
}

/**
 * The REST handler: finds the route, checks the API key, parses and checks the query, reads the
 * body within the process's budget and checks it, forwards the caller's Authorization,
 * program_id, Idempotency-Key and request id to the RPC, and writes the result or the error
 * envelope. It owns no data and no business rule. With `tracing`, each request
 * is a server span named by its route, and its RPC a client span under it.
 */
export function createRestHandler(routes: Route[], clients: Clients, options: RestHandlerOptions) {
  const bodyBudget = createBodyBudget(options.bodyBudgetBytes);
  const table = new Map(routes.map((route) => [`${route.method} ${route.path}`, route]));
  const methodsByPath = new Map<string, string[]>();
  for (const route of routes) methodsByPath.set(route.path, [...(methodsByPath.get(route.path) ?? []), route.method]);
  const rest: RestHandlerState = { table, methodsByPath, bodyBudget, clients, options };

  return async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const incomingContext = incomingTrace((name) => header(req, name));
    // Named by route once it is known; a client's path (ids, typos) would make every name unique.
    const traced: TracedSpan | undefined = options.tracing
      ? startSpan(options.tracing, req.method ?? "GET", SpanKind.SERVER, incomingContext, { "http.request.method": req.method ?? "GET" })
      : undefined;
    // Under the span, the request's log lines carry its trace_id and span_id.
    return traced
      ? withActiveSpan(traced.span, () => handleRestRequest(rest, req, res, incomingContext, traced))
      : handleRestRequest(rest, req, res, incomingContext, undefined);
  };
}

/** Answers one REST request with `rest`'s routes and settings, and records its duration, span and log line. */
async function handleRestRequest(
  rest: RestHandlerState,
  req: IncomingMessage,
  res: ServerResponse,
  incomingContext: TraceLink,
  traced: TracedSpan | undefined,
): Promise<void> {
  const { table, methodsByPath, bodyBudget, clients, options } = rest;
  const started = performance.now();
  const incomingId = header(req, REQUEST_ID_HEADER);
  const requestId = incomingId && /^[\w.:-]{1,128}$/.test(incomingId) ? incomingId : randomUUID();
  const url = requestUrl(req);
  const path = url?.pathname.startsWith(API_PREFIX + "/") ? url.pathname.slice(API_PREFIX.length).replace(/\/+$/, "") : undefined;
  const method = req.method ?? "GET";
  const lease = bodyBudget.lease();
  let status = 200;
  try {
    // Budgets are checked before anything else is read: an over-eager client costs almost nothing.
    const rateKey = rateKeyOf(header(req, "authorization"), req.socket.remoteAddress);
    const decision = options.rateLimiter?.take(rateKey);
    if (decision && !decision.ok) throw rateLimited(rateKey, decision.retryAfterSeconds);
    if (!url) throw invalidArgument("the request target or its Host header is not valid");
    const route = path === undefined ? undefined : table.get(`${method} ${path}`);
    if (!route) {
      const allowed = path === undefined ? undefined : methodsByPath.get(path);
      if (allowed) throw methodNotAllowed(method, url.pathname, allowed);
      throw appError(Code.NotFound, "not_found", `no endpoint ${method} ${url.pathname}`);
    }
    // The key before anything the client sent is looked at, and above all before its body is
    // read: a request without a valid key costs a look-up (cached) and no memory. The service
    // checks the key again, as it does for every caller.
    const authorization = header(req, "authorization");
    await principalOfKey(authorization, options.authenticate);
    const query = parseQuery(url.searchParams);
    onlyKnown(query, route.query ?? [], "query");
    let body: Fields = {};
    if (method === "POST" || method === "PUT") {
      const limit = route.largeBody ? Math.max(options.bodyLimitBytes, options.batchBodyLimitBytes ?? 0) : options.bodyLimitBytes;
      body = asObject(parseJsonBody(await readBody(req, limit, lease)));
      onlyKnown(body, route.body ?? [], "body");
    }
    const headers: Record<string, string> = { [REQUEST_ID_HEADER]: requestId };
    if (authorization) headers["authorization"] = authorization;
    const idempotencyKey = header(req, IDEMPOTENCY_KEY_HEADER);
    if (idempotencyKey !== undefined && method !== "GET") headers[IDEMPOTENCY_KEY_HEADER] = idempotencyKey;
    let replayed = false;
    const call: CallOptions = {
      headers,
      timeoutMs: options.callTimeoutMs,
      // Untraced, the caller's W3C trace context passes through untouched, so a tracing setup
      // around the gateway still sees one trace per call.
      ...continueTrace(traced?.link ?? incomingContext, headers),
      onHeader: (h) => {
        if (h.get(IDEMPOTENT_REPLAYED_HEADER) === "true") replayed = true;
      },
    };
    const result = await route.handle({ query, body, programId: header(req, "program_id") ?? "", call }, clients);
    const extra: Record<string, string> = { [REQUEST_ID_HEADER]: requestId };
    if (replayed) extra["Idempotent-Replayed"] = "true";
    send(res, 200, { status: "success", ...result }, extra);
  } catch (err) {
    const envelope = errorEnvelope(err, requestId);
    status = envelope.status;
    if (status >= 500) options.log.error({ request_id: requestId, err }, "request failed");
    // Answered before its body was all read (no key, too large, no budget left): the rest is not
    // read, so the connection cannot carry another request.
    const close: Record<string, string> = req.complete ? {} : { connection: "close" };
    send(res, envelope.status, envelope.body, { [REQUEST_ID_HEADER]: requestId, ...envelope.headers, ...close });
  } finally {
    lease.release();
    const seconds = (performance.now() - started) / 1000;
    const route = path !== undefined && table.has(`${method} ${path}`) ? path : "unmatched";
    httpDuration.observe({ method, route, status: String(status) }, seconds);
    if (traced) {
      if (route !== "unmatched") {
        traced.span.updateName(`${method} ${API_PREFIX}${route}`);
        traced.span.setAttribute("http.route", API_PREFIX + route);
      }
      traced.span.setAttribute("http.response.status_code", status);
      if (status >= 500) recordFailure(traced.span, String(status));
      traced.span.end();
    }
    options.log.info({ request_id: requestId, method, path: url?.pathname, status, ms: Math.round(seconds * 1000) }, "request");
  }
}
