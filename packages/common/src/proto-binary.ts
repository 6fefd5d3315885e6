// protobuf-es's binary encoding without its per-field garbage. Why and what it was measured
// against: docs/decisions/proto-binary-codec.md.
import { protoInt64, ScalarType, toBinary, type DescField, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import { isWrapperDesc } from "@bufbuild/protobuf/wkt";

/**
 * `toBinary(schema, message)`, the same bytes, written in two passes: one measures every nested
 * message, string and packed list, the next writes them into one buffer of the exact size.
 * protobuf-es's `toBinary` wraps each message and list in a reflection object and writes through
 * an array of numbers and a chunk per string, length prefix and nested message, joined at the end:
 * 16-17% of all the bytes the one process allocated per RPC transfer, nearly all of it the answer.
 * Used wherever a message is encoded per request: answers on the wire and in memory, idempotency
 * fingerprints and stored answers, events.
 *
 * The same rules as `toBinary`: fields in number order, proto3's implicit presence (zero values
 * left out), packed repeated scalars, map entries with both key and value, `google.protobuf.Struct`
 * fields given as plain JSON objects, and unknown fields written back at the end. Values it would
 * refuse (an int32 out of range, a malformed 64-bit string) throw here too. A schema with what this
 * does not write (proto2 groups, required fields and closed enums, wrapper types unwrapped in a
 * field, Struct in a list or map) goes to `toBinary`. `proto-binary.test.ts` holds the two to the
 * same bytes.
 */
export function encodeBinary<Desc extends DescMessage>(schema: Desc, message: MessageShape<Desc>): Uint8Array {
  const plan = planOf(schema);
  if (!plan.supported) return toBinary(schema, message);
  sizes.length = 0;
  const size = measureMessage(plan, message as Record<string, unknown>);
  out = Buffer.allocUnsafe(size);
  pos = 0;
  cursor = 0;
  writeMessage(plan, message as Record<string, unknown>);
  // Every byte of the buffer must have been written: it is not zeroed.
  if (pos !== size) throw new Error(`encodeBinary(${schema.typeName}): wrote ${pos} bytes of ${size} measured`);
  // A plain Uint8Array as toBinary answers, not the Buffer: bytes fields decoded from it would be
  // Buffers. A small one is a view of Node's shared 8 KB allocation pool: fine for bytes that are
  // sent, hashed or stored and dropped, as all of ours are.
  const bytes = new Uint8Array(out.buffer, out.byteOffset, size);
  out = EMPTY;
  return bytes;
}

const EMPTY = Buffer.alloc(0);

// The state of the one encoding under way (encoding is synchronous and calls nothing that encodes).
/** Measured lengths of nested messages, strings and packed lists, in the order the writer meets them. */
const sizes: number[] = [];
let cursor = 0;
let out: Buffer = EMPTY;
let pos = 0;

enum WireType {
  Varint = 0,
  Bit64 = 1,
  LengthDelimited = 2,
  Bit32 = 5,
}

/** How one message type is written and read (`proto-binary-decode.ts` reads with the same plans). */
export interface Plan {
  desc: DescMessage;
  /** In number order. */
  fields: FieldPlan[];
  byNumber: Map<number, FieldPlan>;
  /** False when the type or one it contains needs protobuf-es's own `toBinary` and `fromBinary`. */
  supported: boolean;
}

export interface FieldPlan {
  kind: "scalar" | "message" | "struct" | "list" | "map";
  number: number;
  localName: string;
  /** The oneof's local name when the field is a member of one. */
  oneof: string | undefined;
  /** Proto3 implicit presence: left out at its zero value. */
  implicit: boolean;
  /** The field's tag as written (number and wire type). */
  tag: number;
  /** Scalars, enums (INT32), a list's items, a map's values. */
  scalar: ScalarType;
  /** An enum's first value, its zero for implicit presence; undefined for other fields. */
  enumZero: number | undefined;
  /** Messages, a list's or map's message values. */
  message: Plan | undefined;
  /** Lists: items written as one length-delimited run. */
  packed: boolean;
  /** Lists: the tag of each item when not packed. */
  itemTag: number;
  /** Maps. */
  mapKey: ScalarType;
  mapValueTag: number;
  /** 64-bit values held as decimal strings (`jstype = JS_STRING`). */
  longAsString: boolean;
  /** Strings refused unless valid UTF-8 (proto3's rule). */
  strictUtf8: boolean;
}

const plans = new WeakMap<DescMessage, Plan>();

export function planOf(desc: DescMessage): Plan {
  let plan = plans.get(desc);
  if (plan) return plan;
  // Registered before its fields are planned, so that recursive types (Value, ListValue) end.
  plan = { desc, fields: [], byNumber: new Map(), supported: true };
  plans.set(desc, plan);
  const fields = [...desc.fields].sort((a, b) => a.number - b.number);
  for (const field of fields) {
    const fieldPlan = planField(field);
    if (!fieldPlan || (fieldPlan.message && !fieldPlan.message.supported)) {
      plan.supported = false;
      continue;
    }
    plan.fields.push(fieldPlan);
    plan.byNumber.set(fieldPlan.number, fieldPlan);
  }
  return plan;
}

/** How one field is written; undefined for what this encoder leaves to `toBinary`. */
function planField(field: DescField): FieldPlan | undefined {
  // LEGACY_REQUIRED (proto2 `required`) and groups (`delimitedEncoding`).
  if (field.presence === 3) return undefined;
  if ("delimitedEncoding" in field && field.delimitedEncoding) return undefined;
  // Closed (proto2) enums: an unknown number read goes to the unknown fields.
  if ((field.fieldKind === "enum" || (field.fieldKind === "list" && field.listKind === "enum")) && !field.enum.open) return undefined;
  const base = {
    number: field.number,
    localName: field.localName,
    longAsString: "longAsString" in field && field.longAsString === true,
    strictUtf8: "utf8Validation" in field && field.utf8Validation === true,
    oneof: field.oneof?.localName,
    implicit: field.presence === 2,
    enumZero: undefined,
    message: undefined,
    packed: false,
    itemTag: 0,
    mapKey: ScalarType.STRING,
    mapValueTag: 0,
  };
  switch (field.fieldKind) {
    case "scalar":
      return Object.assign({}, base, { kind: "scalar" as const, scalar: field.scalar, tag: tagOf(field.number, wireTypeOf(field.scalar)) });
    case "enum":
      return Object.assign({}, base, {
        kind: "scalar" as const,
        scalar: ScalarType.INT32,
        enumZero: field.enum.values[0]?.number ?? 0,
        tag: tagOf(field.number, WireType.Varint),
      });
    case "message": {
      const tag = tagOf(field.number, WireType.LengthDelimited);
      if (isWrapperDesc(field.message) && !field.oneof) return undefined;
      const struct = field.message.typeName === "google.protobuf.Struct" && field.parent.typeName !== "google.protobuf.Value";
      return Object.assign({}, base, {
        kind: struct ? ("struct" as const) : ("message" as const),
        scalar: ScalarType.INT32,
        message: planOf(field.message),
        tag,
      });
    }
    case "list": {
      if (field.listKind === "message") {
        if (field.message.typeName === "google.protobuf.Struct") return undefined;
        const tag = tagOf(field.number, WireType.LengthDelimited);
        return Object.assign({}, base, {
          kind: "list" as const,
          scalar: ScalarType.INT32,
          message: planOf(field.message),
          tag,
          itemTag: tag,
        });
      }
      const scalar = field.listKind === "enum" ? ScalarType.INT32 : field.scalar;
      return Object.assign({}, base, {
        kind: "list" as const,
        scalar,
        packed: field.packed,
        tag: tagOf(field.number, WireType.LengthDelimited),
        itemTag: tagOf(field.number, wireTypeOf(scalar)),
      });
    }
    case "map": {
      const tag = tagOf(field.number, WireType.LengthDelimited);
      if (field.mapKind === "message") {
        if (field.message.typeName === "google.protobuf.Struct") return undefined;
        return Object.assign({}, base, {
          kind: "map" as const,
          scalar: ScalarType.INT32,
          message: planOf(field.message),
          tag,
          mapKey: field.mapKey,
          mapValueTag: tagOf(2, WireType.LengthDelimited),
        });
      }
      const scalar = field.mapKind === "enum" ? ScalarType.INT32 : field.scalar;
      // An enum's first value is what a map entry without a value holds.
      const enumZero = field.mapKind === "enum" ? (field.enum.values[0]?.number ?? 0) : undefined;
      return Object.assign({}, base, {
        kind: "map" as const,
        scalar,
        enumZero,
        tag,
        mapKey: field.mapKey,
        mapValueTag: tagOf(2, wireTypeOf(scalar)),
      });
    }
  }
}

function tagOf(number: number, wireType: WireType): number {
  return ((number << 3) | wireType) >>> 0;
}

function wireTypeOf(type: ScalarType): WireType {
  switch (type) {
    case ScalarType.BYTES:
    case ScalarType.STRING:
      return WireType.LengthDelimited;
    case ScalarType.DOUBLE:
    case ScalarType.FIXED64:
    case ScalarType.SFIXED64:
      return WireType.Bit64;
    case ScalarType.FIXED32:
    case ScalarType.SFIXED32:
    case ScalarType.FLOAT:
      return WireType.Bit32;
    default:
      return WireType.Varint;
  }
}

// ---- Presence: as protobuf-es's `isFieldSet` and `isScalarZeroValue`.

/** The field's value when it is to be written, else undefined. */
function fieldValue(field: FieldPlan, message: Record<string, unknown>): unknown {
  if (field.oneof !== undefined) {
    const oneof = message[field.oneof] as { case: string | undefined; value?: unknown };
    return oneof.case === field.localName ? oneof.value : undefined;
  }
  const value = message[field.localName];
  if (!field.implicit) return value !== undefined && Object.hasOwn(message, field.localName) ? value : undefined;
  switch (field.kind) {
    case "list":
      return (value as unknown[]).length > 0 ? value : undefined;
    case "map":
      for (const _ in value as object) return value;
      return undefined;
    default:
      if (field.enumZero !== undefined) return value === field.enumZero ? undefined : value;
      return isZero(field.scalar, value) ? undefined : value;
  }
}

function isZero(type: ScalarType, value: unknown): boolean {
  switch (type) {
    case ScalarType.BOOL:
      return value === false;
    case ScalarType.STRING:
      return value === "";
    case ScalarType.BYTES:
      return value instanceof Uint8Array && value.byteLength === 0;
    case ScalarType.DOUBLE:
    case ScalarType.FLOAT:
      return Object.is(value, 0);
    default:
      // 0, 0n and "0", as protobuf-es compares.
      // biome-ignore lint/suspicious/noDoubleEquals: the loose comparison is the rule being matched
      return value == 0;
  }
}

// ---- Measuring.

function measureMessage(plan: Plan, message: Record<string, unknown>): number {
  let size = 0;
  for (const field of plan.fields) {
    const value = fieldValue(field, message);
    if (value === undefined) continue;
    size += measureField(field, value);
  }
  const unknown = message["$unknown"] as { no: number; wireType: number; data: Uint8Array }[] | undefined;
  if (unknown) for (const u of unknown) size += varintSize(tagOf(u.no, u.wireType)) + u.data.byteLength;
  return size;
}

function measureField(field: FieldPlan, value: unknown): number {
  const tagSize = varintSize(field.tag);
  switch (field.kind) {
    case "scalar":
      return tagSize + measureScalar(field.scalar, value);
    case "message":
      return tagSize + measureNested(field.message!, value as Record<string, unknown>);
    case "struct":
      return tagSize + measureNestedStruct(value);
    case "list": {
      const items = value as unknown[];
      if (field.message) {
        let size = 0;
        for (const item of items) size += tagSize + measureNested(field.message, item as Record<string, unknown>);
        return size;
      }
      if (field.packed) {
        const slot = reserveLength();
        let run = 0;
        for (const item of items) run += measureScalar(field.scalar, item);
        return tagSize + fillLength(slot, run);
      }
      let size = 0;
      const itemTagSize = varintSize(field.itemTag);
      for (const item of items) size += itemTagSize + measureScalar(field.scalar, item);
      return size;
    }
    case "map": {
      let size = 0;
      for (const key in value as object) {
        if (!Object.hasOwn(value as object, key)) continue;
        const entryValue = (value as Record<string, unknown>)[key];
        const slot = reserveLength();
        let entry = 1 + measureScalar(field.mapKey, mapKey(field.mapKey, key));
        entry += varintSize(field.mapValueTag);
        entry += field.message
          ? measureNested(field.message, entryValue as Record<string, unknown>)
          : measureScalar(field.scalar, entryValue);
        size += tagSize + fillLength(slot, entry);
      }
      return size;
    }
  }
}

/** A nested message's length prefix and body; its length is kept for the writer. */
function measureNested(plan: Plan, message: Record<string, unknown>): number {
  const slot = reserveLength();
  return fillLength(slot, measureMessage(plan, message));
}

/** A place in `sizes` for a length the writer will need before what it covers is measured. */
function reserveLength(): number {
  sizes.push(0);
  return sizes.length - 1;
}

/** Keeps the measured `length` in its place; answers it with its own varint prefix. */
function fillLength(slot: number, length: number): number {
  sizes[slot] = length;
  return varintSize(length) + length;
}

function measureScalar(type: ScalarType, value: unknown): number {
  switch (type) {
    case ScalarType.STRING: {
      const length = Buffer.byteLength(value as string, "utf8");
      sizes.push(length);
      return varintSize(length) + length;
    }
    case ScalarType.BYTES: {
      const length = (value as Uint8Array).byteLength;
      return varintSize(length) + length;
    }
    case ScalarType.BOOL:
      return 1;
    case ScalarType.DOUBLE:
    case ScalarType.FIXED64:
    case ScalarType.SFIXED64:
      return 8;
    case ScalarType.FLOAT:
    case ScalarType.FIXED32:
    case ScalarType.SFIXED32:
      return 4;
    case ScalarType.INT32: {
      const n = int32(value);
      return n < 0 ? 10 : varintSize(n);
    }
    case ScalarType.UINT32:
      return varintSize(uint32(value));
    case ScalarType.SINT32: {
      const n = int32(value);
      return varintSize(((n << 1) ^ (n >> 31)) >>> 0);
    }
    case ScalarType.INT64:
    case ScalarType.UINT64: {
      const small = smallUnsigned(value);
      if (small !== undefined) return varintSize(small);
      const { lo, hi } = type === ScalarType.INT64 ? protoInt64.enc(value as bigint) : protoInt64.uEnc(value as bigint);
      return varint64Size(lo, hi);
    }
    case ScalarType.SINT64: {
      const { lo, hi } = zigzag64(value);
      return varint64Size(lo, hi);
    }
  }
  throw new Error(`unknown scalar type ${type}`);
}

// ---- Writing: the same walk, in the same order, reading the lengths measured.

function writeMessage(plan: Plan, message: Record<string, unknown>): void {
  for (const field of plan.fields) {
    const value = fieldValue(field, message);
    if (value === undefined) continue;
    writeField(field, value);
  }
  const unknown = message["$unknown"] as { no: number; wireType: number; data: Uint8Array }[] | undefined;
  if (unknown) {
    for (const u of unknown) {
      writeVarint(tagOf(u.no, u.wireType));
      out.set(u.data, pos);
      pos += u.data.byteLength;
    }
  }
}

function writeField(field: FieldPlan, value: unknown): void {
  switch (field.kind) {
    case "scalar":
      writeVarint(field.tag);
      writeScalar(field.scalar, value);
      return;
    case "message":
      writeVarint(field.tag);
      writeNested(field.message!, value as Record<string, unknown>);
      return;
    case "struct":
      writeVarint(field.tag);
      writeNestedStruct(value);
      return;
    case "list": {
      const items = value as unknown[];
      if (field.message) {
        for (const item of items) {
          writeVarint(field.tag);
          writeNested(field.message, item as Record<string, unknown>);
        }
        return;
      }
      if (field.packed) {
        writeVarint(field.tag);
        writeVarint(sizes[cursor++]!);
        for (const item of items) writeScalar(field.scalar, item);
        return;
      }
      for (const item of items) {
        writeVarint(field.itemTag);
        writeScalar(field.scalar, item);
      }
      return;
    }
    case "map":
      for (const key in value as object) {
        if (!Object.hasOwn(value as object, key)) continue;
        const entryValue = (value as Record<string, unknown>)[key];
        writeVarint(field.tag);
        writeVarint(sizes[cursor++]!);
        out[pos++] = tagOf(1, wireTypeOf(field.mapKey));
        writeScalar(field.mapKey, mapKey(field.mapKey, key));
        writeVarint(field.mapValueTag);
        if (field.message) writeNested(field.message, entryValue as Record<string, unknown>);
        else writeScalar(field.scalar, entryValue);
      }
      return;
  }
}

function writeNested(plan: Plan, message: Record<string, unknown>): void {
  writeVarint(sizes[cursor++]!);
  writeMessage(plan, message);
}

function writeScalar(type: ScalarType, value: unknown): void {
  switch (type) {
    case ScalarType.STRING: {
      const length = sizes[cursor++]!;
      writeVarint(length);
      pos += out.write(value as string, pos, length, "utf8");
      return;
    }
    case ScalarType.BYTES: {
      const bytes = value as Uint8Array;
      writeVarint(bytes.byteLength);
      out.set(bytes, pos);
      pos += bytes.byteLength;
      return;
    }
    case ScalarType.BOOL:
      out[pos++] = value ? 1 : 0;
      return;
    case ScalarType.DOUBLE:
      pos = out.writeDoubleLE(value as number, pos);
      return;
    case ScalarType.FLOAT:
      pos = out.writeFloatLE(float32(value), pos);
      return;
    case ScalarType.FIXED32:
      pos = out.writeUInt32LE(uint32(value), pos);
      return;
    case ScalarType.SFIXED32:
      pos = out.writeInt32LE(int32(value), pos);
      return;
    case ScalarType.FIXED64:
    case ScalarType.SFIXED64: {
      const { lo, hi } = type === ScalarType.SFIXED64 ? protoInt64.enc(value as bigint) : protoInt64.uEnc(value as bigint);
      pos = out.writeInt32LE(lo, pos);
      pos = out.writeInt32LE(hi, pos);
      return;
    }
    case ScalarType.INT32: {
      const n = int32(value);
      if (n < 0) writeVarint64(n, -1);
      else writeVarint(n);
      return;
    }
    case ScalarType.UINT32:
      writeVarint(uint32(value));
      return;
    case ScalarType.SINT32: {
      const n = int32(value);
      writeVarint(((n << 1) ^ (n >> 31)) >>> 0);
      return;
    }
    case ScalarType.INT64:
    case ScalarType.UINT64: {
      const small = smallUnsigned(value);
      if (small !== undefined) {
        writeVarint(small);
        return;
      }
      const { lo, hi } = type === ScalarType.INT64 ? protoInt64.enc(value as bigint) : protoInt64.uEnc(value as bigint);
      writeVarint64(lo, hi);
      return;
    }
    case ScalarType.SINT64: {
      const { lo, hi } = zigzag64(value);
      writeVarint64(lo, hi);
      return;
    }
  }
}

/** A varint of a non-negative integer below 2^53. */
function writeVarint(n: number): void {
  while (n > 0x7f) {
    out[pos++] = (n % 0x80) | 0x80;
    n = Math.floor(n / 0x80);
  }
  out[pos++] = n;
}

/** A varint of the 64-bit two's complement value `hi:lo` (each read as 32 bits). */
function writeVarint64(lo: number, hi: number): void {
  let low = lo >>> 0;
  let high = hi >>> 0;
  while (high !== 0 || low > 0x7f) {
    out[pos++] = (low & 0x7f) | 0x80;
    low = ((low >>> 7) | (high << 25)) >>> 0;
    high >>>= 7;
  }
  out[pos++] = low;
}

function varintSize(n: number): number {
  let size = 1;
  while (n > 0x7f) {
    n = Math.floor(n / 0x80);
    size++;
  }
  return size;
}

function varint64Size(lo: number, hi: number): number {
  let low = lo >>> 0;
  let high = hi >>> 0;
  let size = 1;
  while (high !== 0 || low > 0x7f) {
    low = ((low >>> 7) | (high << 25)) >>> 0;
    high >>>= 7;
    size++;
  }
  return size;
}

// ---- Values, checked as protobuf-es's writer checks them.

/** A 64-bit value that is a non-negative integer below 2^53, as a number; else undefined. */
function smallUnsigned(value: unknown): number | undefined {
  if (typeof value === "bigint") return value >= 0n && value <= 9007199254740991n ? Number(value) : undefined;
  return undefined;
}

function zigzag64(value: unknown): { lo: number; hi: number } {
  const { lo, hi } = protoInt64.enc(value as bigint);
  const sign = hi >> 31;
  return { lo: (lo << 1) ^ sign, hi: ((hi << 1) | (lo >>> 31)) ^ sign };
}

function int32(value: unknown): number {
  const n = typeof value === "string" ? Number(value) : value;
  if (typeof n !== "number" || !Number.isInteger(n) || n > 0x7fffffff || n < -0x80000000) {
    throw new Error(`invalid int32: ${typeof n === "number" ? n : typeof value}`);
  }
  return n;
}

function uint32(value: unknown): number {
  const n = typeof value === "string" ? Number(value) : value;
  if (typeof n !== "number" || !Number.isInteger(n) || n > 0xffffffff || n < 0) {
    throw new Error(`invalid uint32: ${typeof n === "number" ? n : typeof value}`);
  }
  return n;
}

const FLOAT32_MAX = 3.4028234663852886e38;

function float32(value: unknown): number {
  const n = typeof value === "string" ? Number(value) : value;
  if (typeof n !== "number" || (typeof value === "string" && Number.isNaN(n) && value !== "NaN")) {
    throw new Error(`invalid float32: ${typeof value === "string" ? value : typeof value}`);
  }
  if (Number.isFinite(n) && (n > FLOAT32_MAX || n < -FLOAT32_MAX)) throw new Error(`invalid float32: ${n}`);
  return n;
}

/** A map key from its object-key string to the value written, as protobuf-es converts it. */
function mapKey(type: ScalarType, key: string): unknown {
  switch (type) {
    case ScalarType.STRING:
      return key;
    case ScalarType.BOOL:
      return key === "true" ? true : key === "false" ? false : key;
    case ScalarType.INT64:
    case ScalarType.UINT64:
    case ScalarType.SINT64:
    case ScalarType.FIXED64:
    case ScalarType.SFIXED64:
      return BigInt(key);
    default:
      return Number.parseInt(key, 10);
  }
}

// ---- google.protobuf.Struct given as a JSON object (how protobuf-es represents it in a field).
// Struct { map<string, Value> fields = 1 }; Value { oneof kind: null_value = 1, number_value = 2,
// string_value = 3, bool_value = 4, struct_value = 5, list_value = 6 }; ListValue { repeated Value values = 1 }.

function measureNestedStruct(json: unknown): number {
  const slot = reserveLength();
  return fillLength(slot, measureStruct(json));
}

function measureStruct(json: unknown): number {
  if (json === null || typeof json !== "object" || Array.isArray(json)) return 0;
  let size = 0;
  for (const key in json) {
    if (!structKey(json, key)) continue;
    const slot = reserveLength();
    // The entry: key (field 1) and the Value (field 2), each length-delimited.
    let entry = 1 + measureScalar(ScalarType.STRING, key);
    entry += 1 + measureNestedValue((json as Record<string, unknown>)[key]);
    size += 1 + fillLength(slot, entry);
  }
  return size;
}

/** An own key of the JSON object, as protobuf-es takes them into a Struct (`__proto__` included). */
function structKey(json: object, key: string): boolean {
  return Object.hasOwn(json, key);
}

function measureNestedValue(json: unknown): number {
  const slot = reserveLength();
  return fillLength(slot, measureValue(json));
}

function measureValue(json: unknown): number {
  switch (typeof json) {
    case "number":
      return 1 + 8;
    case "string":
      return 1 + measureScalar(ScalarType.STRING, json);
    case "boolean":
      return 1 + 1;
    case "object": {
      if (json === null) return 1 + 1;
      if (Array.isArray(json)) {
        const slot = reserveLength();
        let list = 0;
        for (const item of json) list += 1 + measureNestedValue(item);
        return 1 + fillLength(slot, list);
      }
      return 1 + measureNestedStruct(json);
    }
    default:
      return 0;
  }
}

function writeNestedStruct(json: unknown): void {
  writeVarint(sizes[cursor++]!);
  if (json === null || typeof json !== "object" || Array.isArray(json)) return;
  for (const key in json) {
    if (!structKey(json, key)) continue;
    out[pos++] = tagOf(1, WireType.LengthDelimited);
    writeVarint(sizes[cursor++]!);
    out[pos++] = tagOf(1, WireType.LengthDelimited);
    writeScalar(ScalarType.STRING, key);
    out[pos++] = tagOf(2, WireType.LengthDelimited);
    writeNestedValue((json as Record<string, unknown>)[key]);
  }
}

function writeNestedValue(json: unknown): void {
  writeVarint(sizes[cursor++]!);
  switch (typeof json) {
    case "number":
      out[pos++] = tagOf(2, WireType.Bit64);
      pos = out.writeDoubleLE(json, pos);
      return;
    case "string":
      out[pos++] = tagOf(3, WireType.LengthDelimited);
      writeScalar(ScalarType.STRING, json);
      return;
    case "boolean":
      out[pos++] = tagOf(4, WireType.Varint);
      out[pos++] = json ? 1 : 0;
      return;
    case "object":
      if (json === null) {
        out[pos++] = tagOf(1, WireType.Varint);
        out[pos++] = 0;
        return;
      }
      if (Array.isArray(json)) {
        out[pos++] = tagOf(6, WireType.LengthDelimited);
        writeVarint(sizes[cursor++]!);
        for (const item of json) {
          out[pos++] = tagOf(1, WireType.LengthDelimited);
          writeNestedValue(item);
        }
        return;
      }
      out[pos++] = tagOf(5, WireType.LengthDelimited);
      writeNestedStruct(json);
      return;
  }
}
