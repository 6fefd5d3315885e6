import { AsyncLocalStorage } from "node:async_hooks";
import {
  Code,
  ConnectError,
  createContextKey,
  createContextValues,
  type CallOptions,
  type HandlerContext,
  type Interceptor,
} from "@connectrpc/connect";
import {
  defaultTextMapGetter,
  defaultTextMapSetter,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Attributes,
  type Context,
  type Span,
  type Tracer,
} from "@opentelemetry/api";
import type { TextMapPropagator } from "@opentelemetry/api";
import type { TracingConfig } from "./config.js";

// What services need of the API to start spans through `startSpan`, without a dependency of their own on it.
export { SpanKind };
export type { Span };

/**
 * OpenTelemetry tracing of one service, when configured (`readTracingConfig`). Absent otherwise:
 * callers hold `Tracing | undefined` and do no span work at all when it is undefined.
 */
export interface Tracing {
  tracer: Tracer;
  /** W3C trace context, read from and written to `traceparent`/`tracestate`. */
  propagator: TextMapPropagator;
  /** Exports the spans the batch processor still holds (tests, and before a process exits). */
  forceFlush(): Promise<void>;
  /** Flushes and stops the exporter; part of a service's `close`. */
  shutdown(): Promise<void>;
}

/**
 * Starts a tracer provider exporting OTLP/HTTP (protobuf or JSON, `config.protocol`) through a
 * batch span processor, or returns undefined when tracing is not configured. The provider is
 * deliberately not registered as the global one: in the one-process mode four services share a
 * process, each with its own `service.name`, and every span here is started from an explicit
 * parent context, so no global context manager is needed either. The SDK and the exporter are
 * loaded only here, when tracing is configured; compiled, they are chunks of their own that a
 * process which does not trace never reads (docs/decisions/lean-bundles.md).
 */
export async function startTracing(config: TracingConfig | undefined, processName: string): Promise<Tracing | undefined> {
  if (!config) return undefined;
  const [
    { W3CTraceContextPropagator },
    { OTLPTraceExporter },
    { defaultResource, resourceFromAttributes },
    { BatchSpanProcessor, TracerProvider },
  ] = (
    await Promise.all([
      import("@opentelemetry/core"),
      // Two packages with the same class and options; only the body's encoding differs.
      config.protocol === "http/json"
        ? import("@opentelemetry/exporter-trace-otlp-http")
        : import("@opentelemetry/exporter-trace-otlp-proto"),
      import("@opentelemetry/resources"),
      import("@opentelemetry/sdk-trace"),
    ])
  ).map(commonJsExports) as [
    typeof import("@opentelemetry/core"),
    typeof import("@opentelemetry/exporter-trace-otlp-http"),
    typeof import("@opentelemetry/resources"),
    typeof import("@opentelemetry/sdk-trace"),
  ];
  const exporter = new OTLPTraceExporter({ url: config.tracesUrl, headers: config.headers });
  const provider = new TracerProvider({
    resource: defaultResource().merge(resourceFromAttributes({ "service.name": config.serviceName ?? processName })),
    spanProcessors: [new BatchSpanProcessor({ exporter, scheduledDelayMillis: config.exportDelayMs })],
  });
  return {
    tracer: provider.getTracer(`@ledger/${processName}`),
    propagator: new W3CTraceContextPropagator(),
    forceFlush: () => provider.forceFlush(),
    shutdown: () => provider.shutdown(),
  };
}

/**
 * The exports of a CommonJS package loaded with `import()`. From source, node (or vitest) gives
 * them as named exports; in the compiled build each of these packages is a chunk of its own
 * (scripts/build.mjs, `splitting`) whose only export is the package's `module.exports`, as
 * `default`. Neither package has a `default` export of its own.
 */
function commonJsExports(module: object): object {
  const fallback = (module as { default?: unknown }).default;
  return typeof fallback === "object" && fallback !== null ? fallback : module;
}

/**
 * Where a piece of work sits in a trace, handed from a call to the calls and events it causes,
 * as the request id is. `traceparent` is what an event stores; `context` is set only when this
 * process traces, so that calls made for the work become children of its span.
 */
export interface TraceLink {
  /** W3C `traceparent` of the span doing the work, or the caller's as received when untraced; "" when none. */
  traceparent: string;
  /** W3C `tracestate` going with it; "" when none. */
  tracestate: string;
  context?: Context;
}

/** Work no traced call caused (hold expiry and recovery). */
export const NO_TRACE: TraceLink = Object.freeze({ traceparent: "", tracestate: "" });

// Longer values are not trace context but abuse; the gateway has passed on at most this much since before tracing.
export const MAX_TRACE_HEADER = 512;

/**
 * The caller's W3C trace context as received. A process that does not trace passes it on
 * unchanged, so a tracing setup around this one still sees one trace per call.
 */
export function incomingTrace(get: (name: string) => string | null | undefined): TraceLink {
  const traceparent = get("traceparent") ?? "";
  if (traceparent === "" || traceparent.length > MAX_TRACE_HEADER) return NO_TRACE;
  const tracestate = get("tracestate") ?? "";
  return { traceparent, tracestate: tracestate.length > MAX_TRACE_HEADER ? "" : tracestate };
}

function parentContext(tracing: Tracing, parent: TraceLink): Context {
  if (parent.context) return parent.context;
  if (parent.traceparent === "") return ROOT_CONTEXT;
  // An invalid traceparent extracts to no parent, so the span starts a trace of its own.
  return tracing.propagator.extract(ROOT_CONTEXT, { traceparent: parent.traceparent, tracestate: parent.tracestate }, defaultTextMapGetter);
}

/** A started span and the link that continues its trace. */
export interface TracedSpan {
  span: Span;
  link: TraceLink;
}

/** Starts a span as a child of `parent` (a root span when it carries no valid context). */
export function startSpan(tracing: Tracing, name: string, kind: SpanKind, parent: TraceLink, attributes?: Attributes): TracedSpan {
  const span = tracing.tracer.startSpan(name, { kind, ...(attributes ? { attributes } : {}) }, parentContext(tracing, parent));
  const context = trace.setSpan(ROOT_CONTEXT, span);
  const carrier: Record<string, string> = {};
  tracing.propagator.inject(context, carrier, defaultTextMapSetter);
  return { span, link: { traceparent: carrier["traceparent"] ?? "", tracestate: carrier["tracestate"] ?? "", context } };
}

/**
 * The span that log lines written now belong to. Spans are handed on explicitly (`TraceLink`), so
 * this store serves the logs only: `withActiveSpan` is called only where a span was started, that
 * is only when the process traces, and a process that does not trace never enters it and pays
 * nothing for it.
 */
const activeSpan = new AsyncLocalStorage<Span>();

/** Runs `work` with `span` as the span its log lines name (`trace_id`, `span_id`), across its awaits. */
export function withActiveSpan<T>(span: Span, work: () => T): T {
  return activeSpan.run(span, work);
}

/** The ids of the span work runs under, for a log line; undefined outside one (and always when untraced). */
export function activeTraceIds(): { trace_id: string; span_id: string } | undefined {
  const context = activeSpan.getStore()?.spanContext();
  return context ? { trace_id: context.traceId, span_id: context.spanId } : undefined;
}

/** Marks a span failed with the error's class, never its message: messages may carry data that is not ours to export. */
export function recordFailure(span: Span, kind: string): void {
  span.setStatus({ code: SpanStatusCode.ERROR, message: kind });
  span.setAttribute("error.type", kind);
}

const traceKey = createContextKey<TraceLink | undefined>(undefined, { description: "trace" });

// Connect's wire names for codes (`not_found`), as OpenTelemetry's RPC conventions want them.
function codeName(code: Code): string {
  return Code[code].replace(/[A-Z]/g, (c, i: number) => (i === 0 ? c.toLowerCase() : `_${c.toLowerCase()}`));
}

function rpcAttributes(typeName: string, method: string): Attributes {
  return { "rpc.system": "connect_rpc", "rpc.service": typeName, "rpc.method": method };
}

/** Runs a call under `span`: a failure marks the span with the call's code, and the span ends either way. */
async function underRpcSpan<T>(span: Span, call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (err) {
    const code = codeName(ConnectError.from(err).code);
    span.setAttribute("rpc.connect_rpc.error_code", code);
    recordFailure(span, code);
    throw err;
  } finally {
    span.end();
  }
}

/**
 * A server span for every RPC, a child of the caller's `traceparent`. Installed only when the
 * service traces; put it first, so its span covers the other interceptors and sees the error
 * the client sees. Unary calls only: a streaming response would end the span at its first byte.
 */
export function traceServerInterceptor(tracing: Tracing): Interceptor {
  return (next) => async (req) => {
    const parent = incomingTrace((name) => req.header.get(name));
    const { span, link } = startSpan(
      tracing,
      `${req.service.typeName}/${req.method.name}`,
      SpanKind.SERVER,
      parent,
      rpcAttributes(req.service.typeName, req.method.name),
    );
    req.contextValues.set(traceKey, link);
    return withActiveSpan(span, () => underRpcSpan(span, () => next(req)));
  };
}

/** The server interceptors of tracing: none when it is off, so an untraced call costs nothing more. */
export function tracingInterceptors(tracing: Tracing | undefined): Interceptor[] {
  return tracing ? [traceServerInterceptor(tracing)] : [];
}

/**
 * A client span for every call made on behalf of a traced one (see `continueTrace`), whose
 * context goes out in the call's `traceparent`. Calls with no trace (background work) pass as they are.
 */
export function traceClientInterceptor(tracing: Tracing): Interceptor {
  return (next) => async (req) => {
    const parent = req.contextValues.get(traceKey);
    if (!parent?.context) return next(req);
    const { span, link } = startSpan(
      tracing,
      `${req.service.typeName}/${req.method.name}`,
      SpanKind.CLIENT,
      parent,
      rpcAttributes(req.service.typeName, req.method.name),
    );
    req.header.set("traceparent", link.traceparent);
    if (link.tracestate) req.header.set("tracestate", link.tracestate);
    else req.header.delete("tracestate");
    return underRpcSpan(span, () => next(req));
  };
}

/** The trace of the current call: its server span when this service traces, else the caller's context as received. */
export function traceOf(ctx: HandlerContext): TraceLink {
  return ctx.values.get(traceKey) ?? incomingTrace((name) => ctx.requestHeader.get(name));
}

/**
 * Continues `link` on an outgoing call. When this process traces, the link rides in the call's
 * context values and `traceClientInterceptor` makes the client span and its headers; otherwise
 * the caller's W3C headers are added to `headers` unchanged.
 */
export function continueTrace(link: TraceLink, headers: Record<string, string>): Pick<CallOptions, "contextValues"> {
  if (link.context) return { contextValues: createContextValues().set(traceKey, link) };
  if (link.traceparent !== "") {
    headers["traceparent"] = link.traceparent;
    if (link.tracestate !== "") headers["tracestate"] = link.tracestate;
  }
  return {};
}
