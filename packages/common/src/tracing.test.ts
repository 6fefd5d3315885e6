import { createClient, createRouterTransport } from "@connectrpc/connect";
import { LedgerService } from "@ledger/proto/ledger/v1/ledger_pb.js";
import { startOtlpReceiver } from "@ledger/testing";
import { describe, expect, it } from "vitest";
import { createLogger } from "./logger.js";
import {
  continueTrace,
  incomingTrace,
  NO_TRACE,
  SpanKind,
  startSpan,
  startTracing,
  tracingInterceptors,
  withActiveSpan,
} from "./tracing.js";

const TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

describe("untraced", () => {
  it("starts nothing without a configuration", async () => {
    expect(await startTracing(undefined, "ledger")).toBeUndefined();
  });

  it("passes the caller's trace context on unchanged, and nothing when there is none", () => {
    const headers: Record<string, string> = {};
    const link = incomingTrace((name) => ({ traceparent: TRACEPARENT, tracestate: "a=1" })[name]);
    expect(continueTrace(link, headers)).toEqual({});
    expect(headers).toEqual({ traceparent: TRACEPARENT, tracestate: "a=1" });

    const none: Record<string, string> = {};
    expect(
      continueTrace(
        incomingTrace(() => undefined),
        none,
      ),
    ).toEqual({});
    expect(none).toEqual({});
    expect(incomingTrace(() => "x".repeat(513))).toBe(NO_TRACE);
  });
});

describe("traced", () => {
  it("continues the caller's trace, and leaves the headers of an outgoing call to the client interceptor", async () => {
    const tracing = (await startTracing(
      { tracesUrl: "http://127.0.0.1:9/v1/traces", headers: {}, exportDelayMs: 60_000, protocol: "http/json" },
      "ledger",
    ))!;
    const { span, link } = startSpan(
      tracing,
      "work",
      SpanKind.SERVER,
      incomingTrace((name) => (name === "traceparent" ? TRACEPARENT : undefined)),
    );
    expect(link.traceparent).toMatch(/^00-0af7651916cd43dd8448eb211c80319c-[0-9a-f]{16}-01$/);
    expect(link.traceparent).not.toBe(TRACEPARENT);
    const headers: Record<string, string> = {};
    expect(continueTrace(link, headers).contextValues).toBeDefined();
    expect(headers).toEqual({});
    // An invalid parent starts a trace of its own rather than failing the call.
    const fresh = startSpan(tracing, "work", SpanKind.SERVER, { traceparent: "nonsense", tracestate: "" });
    expect(fresh.link.traceparent).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
    // Left unended, so nothing is queued for export and the shutdown has nothing to send.
    expect(span.isRecording() && fresh.span.isRecording()).toBe(true);
    await tracing.shutdown();
  });
});

describe("export protocols", () => {
  for (const protocol of ["http/protobuf", "http/json"] as const) {
    it(`exports spans over OTLP/HTTP as ${protocol}`, async () => {
      const receiver = await startOtlpReceiver();
      try {
        const tracing = (await startTracing({ tracesUrl: receiver.tracesUrl, headers: {}, exportDelayMs: 60_000, protocol }, "ledger"))!;
        const { span } = startSpan(
          tracing,
          "work",
          SpanKind.SERVER,
          incomingTrace((name) => (name === "traceparent" ? TRACEPARENT : undefined)),
          { "rpc.method": "FundEntity", "ledger.legs": 2 },
        );
        span.end();
        await tracing.forceFlush();
        await tracing.shutdown();
        expect(receiver.encodings()).toEqual([protocol === "http/json" ? "json" : "protobuf"]);
        expect(receiver.spans()).toEqual([
          {
            service: "ledger",
            name: "work",
            traceId: "0af7651916cd43dd8448eb211c80319c",
            spanId: span.spanContext().spanId,
            parentSpanId: "b7ad6b7169203331",
            kind: 2,
            attributes: { "rpc.method": "FundEntity", "ledger.legs": 2 },
            statusCode: 0,
          },
        ]);
      } finally {
        await receiver.close();
      }
    });
  }
});

describe("log lines", () => {
  /** A logger whose lines are collected, parsed, instead of written to stdout. */
  function capturedLogger() {
    const lines: Array<Record<string, unknown>> = [];
    const log = createLogger("ledger", "info", { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) });
    return { log, lines };
  }

  it("name the span they were written under, and carry no trace fields outside one", async () => {
    const { log, lines } = capturedLogger();
    const tracing = (await startTracing(
      { tracesUrl: "http://127.0.0.1:9/v1/traces", headers: {}, exportDelayMs: 60_000, protocol: "http/json" },
      "ledger",
    ))!;
    const { span } = startSpan(tracing, "work", SpanKind.SERVER, NO_TRACE);
    log.info("before");
    await withActiveSpan(span, async () => {
      await new Promise((resolve) => setTimeout(resolve, 1));
      log.info("inside, after an await");
    });
    log.info("after");
    expect(lines.map((l) => [l["msg"], l["trace_id"], l["span_id"]])).toEqual([
      ["before", undefined, undefined],
      ["inside, after an await", span.spanContext().traceId, span.spanContext().spanId],
      ["after", undefined, undefined],
    ]);
    await tracing.shutdown();
  });

  it("of an RPC handler name the call's server span, a child of the caller's trace", async () => {
    const { log, lines } = capturedLogger();
    const receiver = await startOtlpReceiver();
    const tracing = (await startTracing(
      { tracesUrl: receiver.tracesUrl, headers: {}, exportDelayMs: 60_000, protocol: "http/protobuf" },
      "ledger",
    ))!;
    const transport = createRouterTransport(
      (router) =>
        router.service(LedgerService, {
          getEntity: async () => {
            log.info("handling");
            return {};
          },
        }),
      { router: { interceptors: tracingInterceptors(tracing) } },
    );
    await createClient(LedgerService, transport).getEntity({}, { headers: { traceparent: TRACEPARENT } });
    await tracing.shutdown();
    await receiver.close();
    const [server] = receiver.spans();
    expect(server).toMatchObject({
      name: "ledger.v1.LedgerService/GetEntity",
      traceId: "0af7651916cd43dd8448eb211c80319c",
      parentSpanId: "b7ad6b7169203331",
    });
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({ msg: "handling", trace_id: server!.traceId, span_id: server!.spanId });
  });

  it("carry no trace fields when tracing is off", async () => {
    const { log, lines } = capturedLogger();
    const transport = createRouterTransport(
      (router) =>
        router.service(LedgerService, {
          getEntity: async () => {
            log.info("handling");
            return {};
          },
        }),
      { router: { interceptors: tracingInterceptors(undefined) } },
    );
    await createClient(LedgerService, transport).getEntity({}, { headers: { traceparent: TRACEPARENT } });
    expect(lines).toHaveLength(1);
    expect(lines[0]).not.toHaveProperty("trace_id");
    expect(lines[0]).not.toHaveProperty("span_id");
  });
});
