// Test-only: seeded random messages of any schema, and a schema with every field shape, for the
// conformance tests of encodeBinary and decodeBinary against protobuf-es.
import { create, createFileRegistry, type DescField, type DescMessage, ScalarType } from "@bufbuild/protobuf";
import {
  FieldDescriptorProto_Label as Label,
  FieldDescriptorProto_Type as Type,
  FieldOptions_JSType as JSType,
  FileDescriptorProtoSchema,
  file_google_protobuf_struct,
  file_google_protobuf_timestamp,
} from "@bufbuild/protobuf/wkt";
import { file_common_v1_common } from "@ledger/proto/common/v1/common_pb.js";
import { file_events_v1_events } from "@ledger/proto/events/v1/events_pb.js";
import { file_hold_v1_hold } from "@ledger/proto/hold/v1/hold_pb.js";
import { file_ledger_v1_identity } from "@ledger/proto/ledger/v1/identity_pb.js";
import { file_ledger_v1_ledger } from "@ledger/proto/ledger/v1/ledger_pb.js";
import { file_ledger_v1_reservation } from "@ledger/proto/ledger/v1/reservation_pb.js";
import { file_notification_v1_notification } from "@ledger/proto/notification/v1/notification_pb.js";

/** A seeded generator, so a failure names a case that can be run again. */
export function rng(seed: number) {
  let s = seed >>> 0;
  const next = () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const int = (n: number) => Math.floor(next() * n);
  const pick = <T>(items: readonly T[]): T => items[int(items.length)]!;
  return { next, int, pick };
}
export type Rng = ReturnType<typeof rng>;

export const STRINGS = ["", "a", "ledger", "é", "日本語", "😀", "\ud800", "x\udc00y", "a".repeat(200), "€".repeat(6000), "0", "\u0000"];
export const INT32 = [0, 1, -1, 127, 128, 300, 16384, -129, 2147483647, -2147483648];
export const UINT32 = [0, 1, 127, 128, 16383, 16384, 2097151, 268435456, 4294967295];
export const INT64 = [
  0n,
  1n,
  -1n,
  127n,
  128n,
  9007199254740991n,
  9007199254740992n,
  -9007199254740993n,
  9223372036854775807n,
  -9223372036854775808n,
];
export const UINT64 = [0n, 1n, 128n, 9007199254740991n, 9007199254740992n, 18446744073709551615n];
export const DOUBLES = [0, -0, 1.5, -2.25, Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, 1e308, 5e-324];
export const FLOATS = [0, -0, 1.5, -2.25, Number.NaN, Number.POSITIVE_INFINITY, 3.4028234663852886e38, 1e-40, 0.1];

export function scalarValue(type: ScalarType, r: Rng, longAsString: boolean): unknown {
  const long = (v: bigint) => (longAsString ? v.toString() : v);
  switch (type) {
    case ScalarType.STRING:
      return r.pick(STRINGS);
    case ScalarType.BYTES:
      return r.pick([new Uint8Array(0), new Uint8Array([0]), new Uint8Array([1, 2, 255]), new Uint8Array(300).fill(7)]);
    case ScalarType.BOOL:
      return r.next() < 0.5;
    case ScalarType.DOUBLE:
      return r.next() < 0.5 ? r.pick(DOUBLES) : (r.next() - 0.5) * 1e6;
    case ScalarType.FLOAT:
      return r.pick(FLOATS);
    case ScalarType.INT32:
    case ScalarType.SINT32:
    case ScalarType.SFIXED32:
      return r.next() < 0.5 ? r.pick(INT32) : r.int(2 ** 32) - 2 ** 31;
    case ScalarType.UINT32:
    case ScalarType.FIXED32:
      return r.next() < 0.5 ? r.pick(UINT32) : r.int(2 ** 32);
    case ScalarType.INT64:
    case ScalarType.SINT64:
    case ScalarType.SFIXED64:
      return long(r.next() < 0.5 ? r.pick(INT64) : BigInt(r.int(2 ** 40)) - 2n ** 39n);
    case ScalarType.UINT64:
    case ScalarType.FIXED64:
      return long(r.next() < 0.5 ? r.pick(UINT64) : BigInt(r.int(2 ** 40)));
  }
}

function jsonValue(r: Rng, depth: number): unknown {
  switch (r.int(depth > 2 ? 4 : 6)) {
    case 0:
      return null;
    case 1:
      return r.next() < 0.5 ? r.int(1000) : r.pick(DOUBLES.filter(Number.isFinite));
    case 2:
      return r.pick(STRINGS);
    case 3:
      return r.next() < 0.5;
    case 4:
      return Array.from({ length: r.int(4) }, () => jsonValue(r, depth + 1));
    default:
      return jsonObject(r, depth + 1);
  }
}

function jsonObject(r: Rng, depth: number): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (let i = r.int(5); i > 0; i--) out[r.pick(["a", "b", "order_id", "2", "10", "é", "", "__proto__x"])] = jsonValue(r, depth);
  return out;
}

function singularValue(field: DescField & { fieldKind: "scalar" | "enum" | "message" }, r: Rng, depth: number): unknown {
  switch (field.fieldKind) {
    case "scalar":
      return scalarValue(field.scalar, r, field.longAsString);
    case "enum":
      return r.pick(field.enum.values).number;
    case "message":
      if (field.message.typeName === "google.protobuf.Struct" && field.parent.typeName !== "google.protobuf.Value") {
        return jsonObject(r, depth);
      }
      return randomMessage(field.message, r, depth + 1);
  }
}

/** A message of `desc` with about half its fields set, at random, nested a few levels at most. */
export function randomMessage(desc: DescMessage, r: Rng, depth = 0): Record<string, unknown> {
  const message = create(desc) as unknown as Record<string, unknown>;
  if (depth > 3) return message;
  for (const oneof of desc.oneofs) {
    if (r.next() < 0.3) continue;
    const field = r.pick(oneof.fields);
    message[oneof.localName] = { case: field.localName, value: singularValue(field as never, r, depth) };
  }
  for (const field of desc.fields) {
    if (field.oneof || r.next() < 0.4) continue;
    switch (field.fieldKind) {
      case "list": {
        const item =
          field.listKind === "message"
            ? () => randomMessage(field.message, r, depth + 1)
            : field.listKind === "enum"
              ? () => r.pick(field.enum.values).number
              : () => scalarValue(field.scalar, r, field.longAsString);
        message[field.localName] = Array.from({ length: r.int(4) }, item);
        break;
      }
      case "map": {
        const entries: Record<string, unknown> = {};
        for (let i = r.int(4); i > 0; i--) {
          const key = String(scalarValue(field.mapKey, r, true));
          entries[key] =
            field.mapKind === "message"
              ? randomMessage(field.message, r, depth + 1)
              : field.mapKind === "enum"
                ? r.pick(field.enum.values).number
                : scalarValue(field.scalar, r, false);
        }
        message[field.localName] = entries;
        break;
      }
      default:
        message[field.localName] = singularValue(field, r, depth);
    }
  }
  return message;
}

/** The test schema: every proto3 field shape, and a proto2 message. */
export function testSchemas() {
  const scalars: [string, Type][] = [
    ["double", Type.DOUBLE],
    ["float", Type.FLOAT],
    ["int64", Type.INT64],
    ["uint64", Type.UINT64],
    ["int32", Type.INT32],
    ["fixed64", Type.FIXED64],
    ["fixed32", Type.FIXED32],
    ["bool", Type.BOOL],
    ["string", Type.STRING],
    ["bytes", Type.BYTES],
    ["uint32", Type.UINT32],
    ["sfixed32", Type.SFIXED32],
    ["sfixed64", Type.SFIXED64],
    ["sint32", Type.SINT32],
    ["sint64", Type.SINT64],
  ];
  const field = (name: string, number: number, type: Type, more: Record<string, unknown> = {}) => ({
    name,
    number,
    type,
    label: Label.OPTIONAL,
    jsonName: name,
    ...more,
  });
  const all = {
    name: "All",
    field: [
      ...scalars.map(([name, type], i) => field(`s_${name}`, i + 1, type)),
      ...scalars.map(([name, type], i) => field(`r_${name}`, i + 20, type, { label: Label.REPEATED })),
      ...scalars.map(([name, type], i) => field(`o_${name}`, i + 40, type, { proto3Optional: true, oneofIndex: i + 1 })),
      field("color", 60, Type.ENUM, { typeName: ".conformance.Color" }),
      field("colors", 61, Type.ENUM, { typeName: ".conformance.Color", label: Label.REPEATED }),
      field("child", 62, Type.MESSAGE, { typeName: ".conformance.All" }),
      field("children", 63, Type.MESSAGE, { typeName: ".conformance.All", label: Label.REPEATED }),
      field("by_name", 64, Type.MESSAGE, { typeName: ".conformance.All.ByNameEntry", label: Label.REPEATED }),
      field("by_number", 65, Type.MESSAGE, { typeName: ".conformance.All.ByNumberEntry", label: Label.REPEATED }),
      field("by_flag", 66, Type.MESSAGE, { typeName: ".conformance.All.ByFlagEntry", label: Label.REPEATED }),
      field("by_long", 67, Type.MESSAGE, { typeName: ".conformance.All.ByLongEntry", label: Label.REPEATED }),
      field("colors_by_id", 68, Type.MESSAGE, { typeName: ".conformance.All.ColorsByIdEntry", label: Label.REPEATED }),
      field("choice_string", 70, Type.STRING, { oneofIndex: 0 }),
      field("choice_long", 71, Type.INT64, { oneofIndex: 0 }),
      field("choice_child", 72, Type.MESSAGE, { typeName: ".conformance.All", oneofIndex: 0 }),
      field("choice_struct", 73, Type.MESSAGE, { typeName: ".google.protobuf.Struct", oneofIndex: 0 }),
      field("metadata", 80, Type.MESSAGE, { typeName: ".google.protobuf.Struct" }),
      field("at", 81, Type.MESSAGE, { typeName: ".google.protobuf.Timestamp" }),
      field("value", 82, Type.MESSAGE, { typeName: ".google.protobuf.Value" }),
      field("list", 83, Type.MESSAGE, { typeName: ".google.protobuf.ListValue" }),
      field("unpacked", 90, Type.INT32, { label: Label.REPEATED, options: { packed: false } }),
      field("long_string", 91, Type.INT64, { options: { jstype: JSType.JS_STRING } }),
      field("ulong_strings", 92, Type.UINT64, { label: Label.REPEATED, options: { jstype: JSType.JS_STRING } }),
    ],
    oneofDecl: [{ name: "choice" }, ...scalars.map(([name]) => ({ name: `_o_${name}` }))],
    nestedType: [
      ["ByNameEntry", Type.STRING, Type.INT32, ""],
      ["ByNumberEntry", Type.INT32, Type.STRING, ""],
      ["ByFlagEntry", Type.BOOL, Type.MESSAGE, ".conformance.All"],
      ["ByLongEntry", Type.SINT64, Type.DOUBLE, ""],
      ["ColorsByIdEntry", Type.UINT32, Type.ENUM, ".conformance.Color"],
    ].map(([name, key, value, typeName]) => ({
      name,
      options: { mapEntry: true },
      field: [field("key", 1, key as Type), field("value", 2, value as Type, typeName ? { typeName } : {})],
    })),
  };
  const proto3 = create(FileDescriptorProtoSchema, {
    name: "conformance.proto",
    package: "conformance",
    syntax: "proto3",
    dependency: ["google/protobuf/struct.proto", "google/protobuf/timestamp.proto"],
    messageType: [all],
    enumType: [
      {
        name: "Color",
        value: [
          { name: "COLOR_UNSPECIFIED", number: 0 },
          { name: "RED", number: 1 },
          { name: "NEGATIVE", number: -1 },
        ],
      },
    ],
  } as never);
  const proto2 = create(FileDescriptorProtoSchema, {
    name: "legacy.proto",
    package: "legacy",
    syntax: "proto2",
    messageType: [
      {
        name: "Legacy",
        field: [
          field("count", 1, Type.INT32, { defaultValue: "5" }),
          field("name", 2, Type.STRING, { defaultValue: "x" }),
          field("numbers", 3, Type.INT32, { label: Label.REPEATED }),
          field("flag", 4, Type.BOOL),
          field("child", 5, Type.MESSAGE, { typeName: ".legacy.Legacy" }),
        ],
      },
    ],
  } as never);
  const wkt = (name: string) =>
    ({ "google/protobuf/struct.proto": file_google_protobuf_struct, "google/protobuf/timestamp.proto": file_google_protobuf_timestamp })[
      name
    ];
  const registry = createFileRegistry(proto3, wkt);
  const legacy = createFileRegistry(proto2, () => undefined);
  return { all: registry.getMessage("conformance.All")!, legacy: legacy.getMessage("legacy.Legacy")! };
}

/** Every message type of the services' protos, nested ones included. */
export function serviceMessages(): DescMessage[] {
  const files = [
    file_common_v1_common,
    file_events_v1_events,
    file_hold_v1_hold,
    file_ledger_v1_identity,
    file_ledger_v1_ledger,
    file_ledger_v1_reservation,
    file_notification_v1_notification,
  ];
  return files.flatMap((f) =>
    f.messages.flatMap(function nested(m): DescMessage[] {
      return [m, ...m.nestedMessages.flatMap(nested)];
    }),
  );
}
