import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { create, createFileRegistry, fromBinary, toJson } from "@bufbuild/protobuf";
import { protoCamelCase } from "@bufbuild/protobuf/reflect";
import { FieldDescriptorProto_Label, FieldDescriptorProto_Type, FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";

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
 * The part of OTLP's `ExportTraceServiceRequest` (opentelemetry/proto/collector/trace/v1) the tests
 * look at, as a protobuf-es schema built from its descriptor: the same field numbers and types as
 * opentelemetry-proto's trace.proto, common.proto and resource.proto, in one file, with the enums
 * read as their numbers (`int32`, the same varint on the wire). Every other field is kept by
 * protobuf-es as an unknown field and left out of the JSON form.
 */
const exportTraceRequestSchema = (() => {
  const { OPTIONAL: one, REPEATED: many } = FieldDescriptorProto_Label;
  const { STRING, BYTES, BOOL, INT32, INT64, DOUBLE, MESSAGE } = FieldDescriptorProto_Type;
  // protoc fills in every field's JSON name; protobuf-es reads it from the descriptor as given.
  const field = (name: string, number: number, type: FieldDescriptorProto_Type, label = one, typeName?: string) =>
    Object.assign({ name, jsonName: protoCamelCase(name), number, type, label }, typeName ? { typeName: `.otlp.${typeName}` } : {});
  const message = (name: string, fields: ReturnType<typeof field>[]) => ({ name, field: fields });
  const file = create(FileDescriptorProtoSchema, {
    name: "otlp-traces.proto",
    package: "otlp",
    syntax: "proto3",
    messageType: [
      message("ExportTraceServiceRequest", [field("resource_spans", 1, MESSAGE, many, "ResourceSpans")]),
      message("ResourceSpans", [field("resource", 1, MESSAGE, one, "Resource"), field("scope_spans", 2, MESSAGE, many, "ScopeSpans")]),
      message("Resource", [field("attributes", 1, MESSAGE, many, "KeyValue")]),
      message("ScopeSpans", [field("spans", 2, MESSAGE, many, "Span")]),
      message("Span", [
        field("trace_id", 1, BYTES),
        field("span_id", 2, BYTES),
        field("parent_span_id", 4, BYTES),
        field("name", 5, STRING),
        field("kind", 6, INT32),
        field("attributes", 9, MESSAGE, many, "KeyValue"),
        field("status", 15, MESSAGE, one, "Status"),
      ]),
      message("Status", [field("code", 3, INT32)]),
      message("KeyValue", [field("key", 1, STRING), field("value", 2, MESSAGE, one, "AnyValue")]),
      {
        name: "AnyValue",
        field: [
          field("string_value", 1, STRING),
          field("bool_value", 2, BOOL),
          field("int_value", 3, INT64),
          field("double_value", 4, DOUBLE),
        ].map((f) => Object.assign(f, { oneofIndex: 0 })),
        oneofDecl: [{ name: "value" }],
      },
    ],
  });
  const schema = createFileRegistry(file, () => undefined).getMessage("otlp.ExportTraceServiceRequest");
  if (!schema) throw new Error("the OTLP descriptor has no ExportTraceServiceRequest");
  return schema;
})();

/** A protobuf export request in the shape of its JSON form (ids in base64, as protobuf's JSON gives bytes). */
function decodeProtobufExport(bytes: Uint8Array): JsonExport {
  const request = fromBinary(exportTraceRequestSchema, bytes);
  return toJson(exportTraceRequestSchema, request, { alwaysEmitImplicit: true }) as JsonExport;
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
