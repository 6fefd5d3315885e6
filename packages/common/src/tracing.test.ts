import { describe, expect, it } from "vitest";
import { continueTrace, incomingTrace, NO_TRACE, SpanKind, startSpan, startTracing } from "./tracing.js";

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
    expect(continueTrace(incomingTrace(() => undefined), none)).toEqual({});
    expect(none).toEqual({});
    expect(incomingTrace(() => "x".repeat(513))).toBe(NO_TRACE);
  });
});

describe("traced", () => {
  it("continues the caller's trace, and leaves the headers of an outgoing call to the client interceptor", async () => {
    const tracing = (await startTracing({ tracesUrl: "http://127.0.0.1:9/v1/traces", headers: {}, exportDelayMs: 60_000 }, "ledger"))!;
    const { span, link } = startSpan(tracing, "work", SpanKind.SERVER, incomingTrace((name) => (name === "traceparent" ? TRACEPARENT : undefined)));
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
