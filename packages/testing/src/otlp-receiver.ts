import { createServer } from "node:http";
import type { AddressInfo } from "node:net";

/** One span as an OTLP/HTTP JSON export carried it, flattened with its service's name. */
export interface ReceivedSpan {
  service: string;
  name: string;
  /** Lowercase hex, 32 characters. */
  traceId: string;
  /** Lowercase hex, 16 characters. */
  spanId: string;
  /** "" for a root span. */
  parentSpanId: string;
  /** OTLP's SpanKind number: 1 internal, 2 server, 3 client, 4 producer, 5 consumer. */
  kind: number;
  attributes: Record<string, string | number | boolean>;
  /** OTLP's status code: 0 unset, 1 ok, 2 error. */
  statusCode: number;
}

/** An in-process OpenTelemetry collector stand-in: accepts `POST /v1/traces` with JSON bodies. */
export interface OtlpReceiver {
  /** The traces URL to export to (ends in `/v1/traces`). */
  tracesUrl: string;
  spans(): ReceivedSpan[];
  /** Export requests received, whatever they held (a test of "nothing exported" counts them). */
  requests(): number;
  close(): Promise<void>;
}

interface JsonValue {
  stringValue?: string;
  intValue?: number | string;
  doubleValue?: number;
  boolValue?: boolean;
}
interface JsonAttribute {
  key: string;
  value: JsonValue;
}
interface JsonSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  attributes?: JsonAttribute[];
  status?: { code?: number };
}
interface JsonExport {
  resourceSpans?: Array<{ resource?: { attributes?: JsonAttribute[] }; scopeSpans?: Array<{ spans?: JsonSpan[] }> }>;
}

// OTLP JSON gives ids as hex; protobuf-style JSON would give base64. Either way, hex out.
function hexId(id: string | undefined, length: number): string {
  if (!id) return "";
  if (new RegExp(`^[0-9a-fA-F]{${length}}$`).test(id)) return id.toLowerCase();
  return Buffer.from(id, "base64").toString("hex");
}

function attributeMap(list: JsonAttribute[] | undefined): Record<string, string | number | boolean> {
  const out: Record<string, string | number | boolean> = {};
  for (const { key, value } of list ?? []) {
    const v = value.stringValue ?? value.boolValue ?? value.doubleValue ?? (value.intValue === undefined ? undefined : Number(value.intValue));
    if (v !== undefined) out[key] = v;
  }
  return out;
}

/** Starts the receiver on 127.0.0.1, port 0. Anything but JSON on `/v1/traces` answers 415 and fails the exporter loudly. */
export async function startOtlpReceiver(): Promise<OtlpReceiver> {
  const spans: ReceivedSpan[] = [];
  let requests = 0;
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      if (req.method !== "POST" || req.url !== "/v1/traces") {
        res.writeHead(404).end();
        return;
      }
      if (!String(req.headers["content-type"]).startsWith("application/json")) {
        res.writeHead(415).end();
        return;
      }
      requests++;
      const body = JSON.parse(Buffer.concat(chunks).toString("utf8")) as JsonExport;
      for (const resourceSpans of body.resourceSpans ?? []) {
        const service = String(attributeMap(resourceSpans.resource?.attributes)["service.name"] ?? "");
        for (const scope of resourceSpans.scopeSpans ?? []) {
          for (const span of scope.spans ?? []) {
            spans.push({
              service,
              name: span.name,
              traceId: hexId(span.traceId, 32),
              spanId: hexId(span.spanId, 16),
              parentSpanId: hexId(span.parentSpanId, 16),
              kind: span.kind,
              attributes: attributeMap(span.attributes),
              statusCode: span.status?.code ?? 0,
            });
          }
        }
      }
      res.writeHead(200, { "content-type": "application/json" }).end("{}");
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    tracesUrl: `http://127.0.0.1:${port}/v1/traces`,
    spans: () => [...spans],
    requests: () => requests,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
