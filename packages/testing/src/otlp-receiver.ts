import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { BinaryReader } from "@bufbuild/protobuf/wire";

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

/** An in-process OpenTelemetry collector stand-in: accepts `POST /v1/traces` with JSON or protobuf bodies. */
export interface OtlpReceiver {
  /** The traces URL to export to (ends in `/v1/traces`). */
  tracesUrl: string;
  spans(): ReceivedSpan[];
  /** Export requests received, whatever they held (a test of "nothing exported" counts them). */
  requests(): number;
  /** The encoding of each export request received, in order. */
  encodings(): Array<"json" | "protobuf">;
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
    const v =
      value.stringValue ?? value.boolValue ?? value.doubleValue ?? (value.intValue === undefined ? undefined : Number(value.intValue));
    if (v !== undefined) out[key] = v;
  }
  return out;
}

/**
 * Reads a protobuf `ExportTraceServiceRequest` (opentelemetry/proto/collector/trace/v1) into the
 * shape of its JSON form, ids in hex: only the fields the tests look at, the rest skipped. The
 * field numbers are those of opentelemetry-proto's trace.proto, common.proto and resource.proto.
 */
function decodeProtobufExport(bytes: Uint8Array): JsonExport {
  /** Calls `field` for each field of the message in `buf`, skipping those it does not take. */
  const fields = (buf: Uint8Array, field: (no: number, r: BinaryReader) => boolean) => {
    const r = new BinaryReader(buf);
    while (r.pos < r.len) {
      const [no, wire] = r.tag();
      if (!field(no, r)) r.skip(wire, no);
    }
  };
  const value = (buf: Uint8Array): JsonValue => {
    const v: JsonValue = {};
    fields(buf, (no, r) => {
      if (no === 1) v.stringValue = r.string();
      else if (no === 2) v.boolValue = r.bool();
      else if (no === 3) v.intValue = String(r.int64());
      else if (no === 4) v.doubleValue = r.double();
      else return false;
      return true;
    });
    return v;
  };
  const attribute = (buf: Uint8Array): JsonAttribute => {
    const a: JsonAttribute = { key: "", value: {} };
    fields(buf, (no, r) => {
      if (no === 1) a.key = r.string();
      else if (no === 2) a.value = value(r.bytes());
      else return false;
      return true;
    });
    return a;
  };
  const hex = (b: Uint8Array) => Buffer.from(b).toString("hex");
  const span = (buf: Uint8Array): JsonSpan => {
    const s: JsonSpan = { traceId: "", spanId: "", name: "", kind: 0, attributes: [], status: {} };
    fields(buf, (no, r) => {
      if (no === 1) s.traceId = hex(r.bytes());
      else if (no === 2) s.spanId = hex(r.bytes());
      else if (no === 4) s.parentSpanId = hex(r.bytes());
      else if (no === 5) s.name = r.string();
      else if (no === 6) s.kind = r.int32();
      else if (no === 9) s.attributes!.push(attribute(r.bytes()));
      else if (no === 15) {
        fields(r.bytes(), (n, st) => {
          if (n !== 3) return false;
          s.status!.code = st.int32();
          return true;
        });
      } else return false;
      return true;
    });
    return s;
  };
  const out: Required<JsonExport> = { resourceSpans: [] };
  fields(bytes, (no, r) => {
    if (no !== 1) return false;
    const resourceSpans: { resource: { attributes: JsonAttribute[] }; scopeSpans: Array<{ spans: JsonSpan[] }> } = {
      resource: { attributes: [] },
      scopeSpans: [],
    };
    fields(r.bytes(), (n, rs) => {
      if (n === 1) {
        fields(rs.bytes(), (m, res) => {
          if (m !== 1) return false;
          resourceSpans.resource.attributes.push(attribute(res.bytes()));
          return true;
        });
      } else if (n === 2) {
        const scope = { spans: [] as JsonSpan[] };
        fields(rs.bytes(), (m, ss) => {
          if (m !== 2) return false;
          scope.spans.push(span(ss.bytes()));
          return true;
        });
        resourceSpans.scopeSpans.push(scope);
      } else return false;
      return true;
    });
    out.resourceSpans.push(resourceSpans);
    return true;
  });
  return out;
}

/** Starts the receiver on 127.0.0.1, port 0. A body neither JSON nor protobuf answers 415 and fails the exporter loudly. */
export async function startOtlpReceiver(): Promise<OtlpReceiver> {
  const spans: ReceivedSpan[] = [];
  const encodings: Array<"json" | "protobuf"> = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      if (req.method !== "POST" || req.url !== "/v1/traces") {
        res.writeHead(404).end();
        return;
      }
      const type = String(req.headers["content-type"]);
      const encoding = type.startsWith("application/json") ? "json" : type.startsWith("application/x-protobuf") ? "protobuf" : undefined;
      if (!encoding) {
        res.writeHead(415).end();
        return;
      }
      encodings.push(encoding);
      const raw = Buffer.concat(chunks);
      const body = encoding === "json" ? (JSON.parse(raw.toString("utf8")) as JsonExport) : decodeProtobufExport(raw);
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
      // An empty ExportTraceServiceResponse, in the request's encoding.
      if (encoding === "json") res.writeHead(200, { "content-type": "application/json" }).end("{}");
      else res.writeHead(200, { "content-type": "application/x-protobuf" }).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    tracesUrl: `http://127.0.0.1:${port}/v1/traces`,
    spans: () => [...spans],
    requests: () => encodings.length,
    encodings: () => [...encodings],
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
