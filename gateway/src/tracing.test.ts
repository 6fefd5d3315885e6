import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readTracingConfig } from "@ledger/common";
import { startOtlpReceiver, startWebhookReceiver, type OtlpReceiver, type ReceivedSpan, type WebhookReceiver } from "@ledger/testing";
import { readStream, startStack, type Api, type Stack } from "@ledger/e2e";

// One trace per client call, from the gateway through RPC, the outbox and JetStream to each
// delivery attempt, exported over OTLP/HTTP to a collector stand-in; and, untraced, the caller's
// traceparent still passes through as before.

const SERVER = 2;
const CLIENT = 3;
const CONSUMER = 5;

/** A fresh W3C traceparent as a client would send it. */
function clientTraceparent(): { traceparent: string; traceId: string; spanId: string } {
  const traceId = randomBytes(16).toString("hex");
  const spanId = randomBytes(8).toString("hex");
  return { traceparent: `00-${traceId}-${spanId}-01`, traceId, spanId };
}

async function fundedEntity(api: Api, amount = 1_000): Promise<string> {
  const entity = (await api.post("/entity", { entity_name: "t", entity_type: "wallet" })).body.entity.entity_id as string;
  expect((await api.post("/entity/fund", { entity_id: entity, amount })).status).toBe(200);
  return entity;
}

/**
 * An OTLP receiver, a webhook receiver and a stack whose tracing is read from `env` (given the
 * receiver's URL) by the same code the processes use, as an operator would set it.
 */
async function startTracedSystem(env: (tracesUrl: string) => Record<string, string>) {
  const otlp = await startOtlpReceiver();
  const webhooks = await startWebhookReceiver();
  const tracing = readTracingConfig(env(otlp.tracesUrl));
  const stack = await startStack({ notification: { webhookExtraCa: webhooks.ca }, ...(tracing ? { tracing } : {}) });
  return { otlp, webhooks, stack, tracing };
}

async function stopTracedSystem(system: Partial<Awaited<ReturnType<typeof startTracedSystem>>>) {
  await system.stack?.close();
  await system.webhooks?.close();
  await system.otlp?.close();
}

describe("with tracing configured", () => {
  let otlp: OtlpReceiver;
  let webhooks: WebhookReceiver;
  let stack: Stack;
  beforeAll(async () => {
    // A long export delay: spans reach the receiver because the test flushes, not because time passed.
    ({ otlp, webhooks, stack } = await startTracedSystem((tracesUrl) => ({
      OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: tracesUrl,
      OTEL_BSP_SCHEDULE_DELAY: "60000",
    })));
  });
  afterAll(async () => stopTracedSystem({ otlp, webhooks, stack }));

  const flush = () =>
    Promise.all(
      [stack.gateway.tracing, stack.ledger.tracing, stack.hold?.tracing, stack.notification?.tracing].map((t) => t?.forceFlush()),
    );

  /** The trace's spans once `ready` says all expected ones were exported. */
  async function traceOf(traceId: string, ready: (spans: ReceivedSpan[]) => boolean): Promise<ReceivedSpan[]> {
    const spans = () => otlp.spans().filter((s) => s.traceId === traceId);
    await expect
      .poll(
        async () => {
          await flush();
          return ready(spans());
        },
        { message: `the spans of trace ${traceId}` },
      )
      .toBe(true);
    return spans();
  }

  function one(spans: ReceivedSpan[], service: string, name: string): ReceivedSpan {
    const found = spans.filter((s) => s.service === service && s.name === name);
    expect(
      found.map((s) => `${s.service} ${s.name}`),
      `one ${service} span ${name} among ${spans.map((s) => `${s.service} ${s.name}`).join(", ")}`,
    ).toEqual([`${service} ${name}`]);
    return found[0]!;
  }

  it("follows a transfer from the client's traceparent to the delivery attempt, and never sends it to the receiver", async () => {
    // An account of its own per test, so only this test's destination receives its events.
    const { api } = await stack.newAccount();
    expect((await api.post("/webhooks", { url: webhooks.endpoint("/transfer"), event_types: ["transaction.created"] })).status).toBe(200);
    const entity = await fundedEntity(api);
    const other = await fundedEntity(api, 1);
    const client = clientTraceparent();
    const res = await api.post(
      "/transaction",
      { description: "traced", amount: 5, account: { from: entity, to: other } },
      { traceparent: client.traceparent },
    );
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    const groupId = res.body.transaction_group_id as string;
    const delivered = () => webhooks.received("/transfer").filter((w) => JSON.parse(w.body).data.transaction_group_id === groupId);
    await expect.poll(() => delivered().length).toBe(1);
    const webhook = delivered()[0]!;
    expect(webhook.headers["traceparent"]).toBeUndefined();
    expect(webhook.headers["tracestate"]).toBeUndefined();

    const spans = await traceOf(client.traceId, (s) => s.some((x) => x.service === "notification" && x.kind === CLIENT));
    const rest = one(spans, "gateway", "POST /v1/transaction");
    expect(rest).toMatchObject({
      kind: SERVER,
      parentSpanId: client.spanId,
      attributes: { "http.route": "/v1/transaction", "http.response.status_code": 200 },
    });
    const rpcOut = one(spans, "gateway", "ledger.v1.LedgerService/CreateTransaction");
    expect(rpcOut).toMatchObject({ kind: CLIENT, parentSpanId: rest.spanId });
    const rpcIn = one(spans, "ledger", "ledger.v1.LedgerService/CreateTransaction");
    expect(rpcIn).toMatchObject({
      kind: SERVER,
      parentSpanId: rpcOut.spanId,
      attributes: { "rpc.system": "connect_rpc", "rpc.method": "CreateTransaction" },
    });
    const stored = one(spans, "notification", "process transaction.created");
    expect(stored).toMatchObject({
      kind: CONSUMER,
      parentSpanId: rpcIn.spanId,
      attributes: { "messaging.message.id": webhook.headers["x-service-event-id"] },
    });
    // Retries follow 300 ms apart and may already be exported; the first attempt is the one to look at.
    const attempt = spans.find((s) => s.name === "deliver transaction.created" && s.attributes["webhook.attempt"] === 1)!;
    expect(attempt).toMatchObject({
      kind: CLIENT,
      parentSpanId: stored.spanId,
      attributes: {
        "event.type": "transaction.created",
        "webhook.delivery_id": webhook.headers["x-service-delivery-id"],
        "webhook.attempt": 1,
        "http.response.status_code": 200,
      },
    });
    // Only this call's spans are in its trace: the setup calls made traces of their own.
    expect(spans).toHaveLength(5);
  });

  it("follows a hold capture through the hold service's ledger call and both services' events", async () => {
    const { api } = await stack.newAccount();
    expect(
      (await api.post("/webhooks", { url: webhooks.endpoint("/capture"), event_types: ["transaction.created", "hold.captured"] })).status,
    ).toBe(200);
    const source = await fundedEntity(api);
    const destination = await fundedEntity(api, 1);
    const hold = (await api.post("/hold", { entity_id: source, amount: 300 })).body.hold;
    const client = clientTraceparent();
    const res = await api.post(
      "/hold/capture",
      { hold_id: hold.hold_id, amount: 100, destination_entity_id: destination },
      { traceparent: client.traceparent },
    );
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    const ofThisCapture = () =>
      webhooks.received("/capture").filter((w) => {
        const { type, data } = JSON.parse(w.body);
        return type === "hold.captured"
          ? data.hold_id === hold.hold_id
          : data.legs.some((l: { entity_id: string; amount: number }) => l.entity_id === destination && l.amount === 100);
      });
    await expect.poll(() => ofThisCapture().length).toBe(2);
    for (const w of ofThisCapture()) expect(w.headers["traceparent"]).toBeUndefined();

    const spans = await traceOf(client.traceId, (s) => s.filter((x) => x.name.startsWith("deliver ")).length === 2);
    const rest = one(spans, "gateway", "POST /v1/hold/capture");
    expect(rest.parentSpanId).toBe(client.spanId);
    const toHold = one(spans, "gateway", "hold.v1.HoldService/CaptureHold");
    expect(toHold.parentSpanId).toBe(rest.spanId);
    const inHold = one(spans, "hold", "hold.v1.HoldService/CaptureHold");
    expect(inHold).toMatchObject({ kind: SERVER, parentSpanId: toHold.spanId });
    // A lone capture's ledger call (ApplyReservations carrying just it) continues its trace.
    const toLedger = one(spans, "hold", "ledger.v1.ReservationService/ApplyReservations");
    expect(toLedger).toMatchObject({ kind: CLIENT, parentSpanId: inHold.spanId });
    const inLedger = one(spans, "ledger", "ledger.v1.ReservationService/ApplyReservations");
    expect(inLedger).toMatchObject({ kind: SERVER, parentSpanId: toLedger.spanId });
    // Each event continues from the span that committed it: the transfer from the ledger's, the hold event from the hold service's.
    const storedTransfer = one(spans, "notification", "process transaction.created");
    expect(storedTransfer.parentSpanId).toBe(inLedger.spanId);
    const storedCapture = one(spans, "notification", "process hold.captured");
    expect(storedCapture.parentSpanId).toBe(inHold.spanId);
    expect(one(spans, "notification", "deliver transaction.created").parentSpanId).toBe(storedTransfer.spanId);
    expect(one(spans, "notification", "deliver hold.captured")).toMatchObject({
      parentSpanId: storedCapture.spanId,
      attributes: { "http.response.status_code": 200 },
    });

    const events = (await readStream(stack.natsUrl, stack.stream)).map((s) => s.event);
    const captured = events.find((e) => e.type === "hold.captured" && e.data.case === "hold" && e.data.value.holdId === hold.hold_id)!;
    expect(captured.traceparent).toBe(`00-${client.traceId}-${inHold.spanId}-01`);
  });

  it("records a failed attempt's status on its span", async () => {
    const path = "/refuses";
    const { api } = await stack.newAccount();
    expect(
      (await api.post("/webhooks", { url: webhooks.endpoint(path, () => ({ status: 500 })), event_types: ["transaction.created"] })).status,
    ).toBe(200);
    const entity = (await api.post("/entity", { entity_name: "f", entity_type: "wallet" })).body.entity.entity_id as string;
    const client = clientTraceparent();
    expect((await api.post("/entity/fund", { entity_id: entity, amount: 7 }, { traceparent: client.traceparent })).status).toBe(200);
    const spans = await traceOf(client.traceId, (s) =>
      s.some((x) => x.name === "deliver transaction.created" && x.attributes["webhook.attempt"] === 1),
    );
    // Retries follow 300 ms apart and may already be exported; the first attempt is the one to look at.
    const attempt = spans.find((s) => s.name === "deliver transaction.created" && s.attributes["webhook.attempt"] === 1)!;
    expect(attempt).toMatchObject({ statusCode: 2, attributes: { "http.response.status_code": 500, "error.type": "500" } });
  });
});

describe("with tracing off", () => {
  let otlp: OtlpReceiver;
  let webhooks: WebhookReceiver;
  let stack: Stack;
  beforeAll(async () => {
    // An endpoint is set but the SDK is disabled: were anything started, it would export here.
    let tracing: unknown;
    ({ otlp, webhooks, stack, tracing } = await startTracedSystem((tracesUrl) => ({
      OTEL_EXPORTER_OTLP_ENDPOINT: tracesUrl.replace(/\/v1\/traces$/, ""),
      OTEL_SDK_DISABLED: "true",
    })));
    expect(tracing).toBeUndefined();
  });
  afterAll(async () => stopTracedSystem({ otlp, webhooks, stack }));

  it("starts no tracer, exports nothing, and passes the caller's traceparent on to the ledger's event unchanged", async () => {
    expect([stack.gateway.tracing, stack.ledger.tracing, stack.hold?.tracing, stack.notification?.tracing]).toEqual([
      undefined,
      undefined,
      undefined,
      undefined,
    ]);
    expect((await stack.api.post("/webhooks", { url: webhooks.endpoint("/off") })).status).toBe(200);
    const entity = (await stack.api.post("/entity", { entity_name: "o", entity_type: "wallet" })).body.entity.entity_id as string;
    const client = clientTraceparent();
    const tracestate = "vendor=abc";
    expect(
      (await stack.api.post("/entity/fund", { entity_id: entity, amount: 3 }, { traceparent: client.traceparent, tracestate })).status,
    ).toBe(200);
    await expect.poll(() => webhooks.received("/off").length).toBe(1);
    const webhook = webhooks.received("/off")[0]!;
    expect(webhook.headers["traceparent"]).toBeUndefined();

    // The ledger built the event from the call as it reached it: the traceparent arrived unchanged.
    const eventId = webhook.headers["x-service-event-id"] as string;
    const [stored] = (await readStream(stack.natsUrl, stack.stream)).filter((s) => s.event.id === eventId);
    expect(stored!.event.traceparent).toBe(client.traceparent);
    const [row] = await stack.notificationSql!`select traceparent from events where id = ${eventId}`;
    expect(row!["traceparent"]).toBe(client.traceparent);
    expect(otlp.requests()).toBe(0);
  });
});
