// protobuf-es's binary decoding without its per-field reflection objects. Why and what it was
// measured against: docs/decisions/proto-binary-codec.md.
import { isUtf8 } from "node:buffer";
import { create, type DescField, type DescMessage, fromBinary, type MessageShape, protoInt64, ScalarType } from "@bufbuild/protobuf";
import { type FieldPlan, type Plan, planOf } from "./proto-binary.js";

/**
 * `fromBinary(schema, bytes)`: the same message from the same bytes, and an error where it throws.
 * protobuf-es reads through a reflection wrapper per message, list and map (each with `Map`s of its
 * own), which was most of what the notification service allocated per event and a large part of
 * what a request's decoding did. This reads straight into the message `create(schema)` makes, by
 * the plans `encodeBinary` writes with, and keeps protobuf-es's rules to the letter, its quirks
 * included: a known field is read as its type whatever the wire type says; scalar lists take packed
 * and unpacked items alike; a message field seen twice is merged, in a map entry too; a map entry's
 * fields other than 1 and 2 are skipped; a map or Struct key `__proto__` is an own property; a
 * nested message may read past its declared length; unknown fields keep their bytes (views of
 * `bytes`, as `bytes` fields are); strings of proto3 fields must be valid UTF-8, and a leading
 * U+FEFF is text, kept; messages nest at most 100 deep.
 * `proto-binary-decode.test.ts` holds the two to equal results on valid and damaged input.
 */
export function decodeBinary<Desc extends DescMessage>(schema: Desc, bytes: Uint8Array): MessageShape<Desc> {
  const plan = planOf(schema);
  if (!plan.supported) return fromBinary(schema, bytes);
  const message = zeroMessage(schema);
  buf = bytes;
  text = undefined;
  view = undefined;
  pos = 0;
  depth = 0;
  try {
    readMessage(plan, message, bytes.byteLength);
  } finally {
    buf = EMPTY;
    text = undefined;
    view = undefined;
  }
  return message as unknown as MessageShape<Desc>;
}

type Message = Record<string, unknown> & { $unknown?: Unknown[] };
type Unknown = { no: number; wireType: number; data: Uint8Array };

const RECURSION_LIMIT = 100;
const EMPTY = new Uint8Array(0);
const lenientUtf8 = new TextDecoder("utf-8", { ignoreBOM: true });

// The state of the one decoding under way (decoding is synchronous and never nests).
let buf: Uint8Array = EMPTY;
/** `buf` as a Buffer, for its native string slicing; made at the first string. */
let text: Buffer | undefined;
/** Made at the first fixed-width number. */
let view: DataView | undefined;
let pos = 0;
let depth = 0;

function readMessage(plan: Plan, message: Message, length: number): void {
  if (++depth > RECURSION_LIMIT) {
    throw new Error(`cannot decode ${plan.desc} from binary: maximum recursion depth of ${RECURSION_LIMIT} reached`);
  }
  const end = pos + length;
  const unknown = message.$unknown ?? [];
  while (pos < end) {
    const tag = readTag();
    const no = tag >>> 3;
    const wireType = tag & 7;
    const field = plan.byNumber.get(no);
    if (!field) {
      unknown.push({ no, wireType, data: skip(wireType, no, RECURSION_LIMIT - depth) });
      continue;
    }
    readField(field, message, wireType);
  }
  if (unknown.length > 0) message.$unknown = unknown;
  depth--;
}

function readField(field: FieldPlan, message: Message, wireType: number): void {
  switch (field.kind) {
    case "scalar":
      setField(field, message, readScalar(field, field.scalar));
      return;
    case "message": {
      const target = (currentValue(field, message) as Message | undefined) ?? zeroMessage(field.message!.desc);
      readMessage(field.message!, target, readVarint32());
      setField(field, message, target);
      return;
    }
    case "struct": {
      // Read as the Struct message it is on the wire, then held as JSON, as protobuf-es holds it.
      const current = currentValue(field, message);
      const target = current === undefined ? zeroMessage(field.message!.desc) : structFromJson(current);
      readMessage(field.message!, target, readVarint32());
      setField(field, message, structToJson(target));
      return;
    }
    case "list": {
      const items = message[field.localName] as unknown[];
      if (field.message) {
        const item = zeroMessage(field.message.desc);
        readMessage(field.message, item, readVarint32());
        items.push(item);
        return;
      }
      const packed = wireType === 2 && field.scalar !== ScalarType.STRING && field.scalar !== ScalarType.BYTES;
      if (!packed) {
        items.push(readScalar(field, field.scalar));
        return;
      }
      const end = readVarint32() + pos;
      while (pos < end) items.push(readScalar(field, field.scalar));
      return;
    }
    case "map":
      readMapEntry(field, message[field.localName] as Record<string, unknown>);
      return;
  }
}

/** A field's value when it holds one (a oneof member only when its case is chosen). */
function currentValue(field: FieldPlan, message: Message): unknown {
  if (field.oneof === undefined) return message[field.localName];
  const oneof = message[field.oneof] as { case: string | undefined; value?: unknown };
  return oneof.case === field.localName ? oneof.value : undefined;
}

function setField(field: FieldPlan, message: Message, value: unknown): void {
  if (field.oneof === undefined) message[field.localName] = value;
  else message[field.oneof] = { case: field.localName, value };
}

function readMapEntry(field: FieldPlan, map: Record<string, unknown>): void {
  const length = readVarint32();
  const end = pos + length;
  let key: unknown;
  let value: unknown;
  while (pos < end) {
    const tag = readTag();
    const no = tag >>> 3;
    if (no === 1) key = readScalar(field, field.mapKey);
    else if (no === 2) {
      if (field.message) {
        // A value given twice in one entry is merged, as any message field is.
        value ??= zeroMessage(field.message.desc);
        readMessage(field.message, value as Message, readVarint32());
      } else value = readScalar(field, field.scalar);
    } else skip(tag & 7, no, RECURSION_LIMIT - depth);
  }
  if (key === undefined) key = zeroOf(field.mapKey, false);
  if (value === undefined) {
    value = field.message ? zeroMessage(field.message.desc) : (field.enumZero ?? zeroOf(field.scalar, field.longAsString));
  }
  setOwn(map, typeof key === "string" ? key : String(key), value);
}

/** `object[key] = value`, except that a key `__proto__` becomes an own property, as protobuf-es sets it. */
function setOwn(object: Record<string, unknown>, key: string, value: unknown): void {
  if (key === "__proto__") Object.defineProperty(object, key, { value, writable: true, enumerable: true, configurable: true });
  else object[key] = value;
}

function zeroOf(type: ScalarType, longAsString: boolean): unknown {
  switch (type) {
    case ScalarType.STRING:
      return "";
    case ScalarType.BOOL:
      return false;
    case ScalarType.BYTES:
      return new Uint8Array(0);
    case ScalarType.INT64:
    case ScalarType.UINT64:
    case ScalarType.SINT64:
    case ScalarType.FIXED64:
    case ScalarType.SFIXED64:
      return longAsString ? "0" : 0n;
    default:
      return 0;
  }
}

// ---- New messages, as protobuf-es's `create` makes them.

/** A member `create` sets on a new message, and what to: a new object each time, or a value. */
type ZeroMember = { name: string; zero: "oneof" | "list" | "map" | "bytes" | "value"; value?: unknown };

/** Per message type: the members a new message gets; null where `create` itself must make it. */
const zeroMembers = new WeakMap<DescMessage, ZeroMember[] | null>();

/**
 * `create(desc)`: the same properties in the same order, from a list made once per type instead of
 * `create`'s walk over the descriptor. Types whose defaults live on a prototype (proto2, and scalars
 * with explicit presence) are left to `create`.
 */
function zeroMessage(desc: DescMessage): Message {
  let members = zeroMembers.get(desc);
  if (members === undefined) {
    members = planZero(desc);
    zeroMembers.set(desc, members);
  }
  if (members === null) return create(desc) as unknown as Message;
  const message: Message = { $typeName: desc.typeName };
  for (const m of members) {
    switch (m.zero) {
      case "oneof":
        message[m.name] = { case: undefined };
        break;
      case "list":
        message[m.name] = [];
        break;
      case "map":
        message[m.name] = {};
        break;
      case "bytes":
        message[m.name] = new Uint8Array(0);
        break;
      default:
        message[m.name] = m.value;
    }
  }
  return message;
}

function planZero(desc: DescMessage): ZeroMember[] | null {
  const IMPLICIT = 2;
  if (desc.fields.some((f) => f.presence !== IMPLICIT && f.fieldKind !== "message" && !f.oneof)) return null;
  const members: ZeroMember[] = [];
  for (const member of desc.members) {
    if (member.kind === "oneof") {
      members.push({ name: member.localName, zero: "oneof" });
      continue;
    }
    if (member.presence !== IMPLICIT) continue;
    const field: DescField = member;
    if (field.fieldKind === "list") members.push({ name: field.localName, zero: "list" });
    else if (field.fieldKind === "map") members.push({ name: field.localName, zero: "map" });
    else if (field.fieldKind === "enum") members.push({ name: field.localName, zero: "value", value: field.enum.values[0]!.number });
    else if (field.fieldKind === "scalar") {
      if (field.scalar === ScalarType.BYTES) members.push({ name: field.localName, zero: "bytes" });
      else members.push({ name: field.localName, zero: "value", value: zeroOf(field.scalar, field.longAsString) });
    } else return null;
  }
  return members;
}

// ---- Scalars, as protobuf-es's BinaryReader reads them.

function readScalar(field: FieldPlan, type: ScalarType): unknown {
  switch (type) {
    case ScalarType.STRING:
      return readString(field.strictUtf8);
    case ScalarType.BOOL: {
      readVarint64();
      return lo !== 0 || hi !== 0;
    }
    case ScalarType.DOUBLE:
      return dataView().getFloat64(advance(8), true);
    case ScalarType.FLOAT:
      return dataView().getFloat32(advance(4), true);
    case ScalarType.INT32:
      return readVarint32() | 0;
    case ScalarType.UINT32:
      return readVarint32();
    case ScalarType.SINT32: {
      const n = readVarint32();
      return (n >>> 1) ^ -(n & 1);
    }
    case ScalarType.FIXED32:
      return dataView().getUint32(advance(4), true);
    case ScalarType.SFIXED32:
      return dataView().getInt32(advance(4), true);
    case ScalarType.BYTES: {
      const [start, end] = readLengthDelimited();
      return buf.subarray(start, end);
    }
    case ScalarType.INT64:
    case ScalarType.UINT64: {
      readVarint64();
      return long(type === ScalarType.INT64, field.longAsString);
    }
    case ScalarType.SINT64: {
      readVarint64();
      const sign = -(lo & 1);
      const low = ((lo >>> 1) | ((hi & 1) << 31)) ^ sign;
      hi = (hi >>> 1) ^ sign;
      lo = low;
      return long(true, field.longAsString);
    }
    case ScalarType.FIXED64:
    case ScalarType.SFIXED64: {
      const v = dataView();
      lo = v.getInt32(advance(4), true);
      hi = v.getInt32(advance(4), true);
      return long(type === ScalarType.SFIXED64, field.longAsString);
    }
  }
  throw new Error(`unknown scalar type ${type}`);
}

/** The 64-bit value in `hi:lo`, as protobuf-es holds it: a bigint, or its decimal string. */
function long(signed: boolean, asString: boolean): bigint | string {
  // Below 2^32 and non-negative: no DataView round trip.
  const value = hi === 0 ? BigInt(lo >>> 0) : signed ? protoInt64.dec(lo, hi) : protoInt64.uDec(lo, hi);
  return asString ? String(value) : (value as bigint);
}

function readString(strict: boolean): string {
  const [start, end] = readLengthDelimited();
  let ascii = true;
  for (let i = start; i < end; i++) {
    if (buf[i]! >= 0x80) {
      ascii = false;
      break;
    }
  }
  text ??= Buffer.from(buf.buffer, buf.byteOffset, buf.byteLength);
  if (ascii) return text.toString("latin1", start, end);
  const bytes = buf.subarray(start, end);
  // Valid: Node's own slicing gives what TextDecoder gives (a leading U+FEFF kept by both).
  if (isUtf8(bytes)) return text.toString("utf8", start, end);
  if (strict) return strictUtf8().decode(bytes);
  return lenientUtf8.decode(bytes);
}

let strictDecoder: InstanceType<typeof TextDecoder> | undefined;
function strictUtf8(): InstanceType<typeof TextDecoder> {
  strictDecoder ??= new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
  return strictDecoder;
}

/** A length prefix and the bounds of what it covers, refused past the end of the input. */
function readLengthDelimited(): [number, number] {
  const length = readVarint32();
  const start = pos;
  pos += length;
  assertBounds();
  return [start, start + length];
}

/** The offset of a fixed-width value, and `pos` moved past it (DataView refuses one past the end). */
function advance(width: number): number {
  const at = pos;
  pos += width;
  return at;
}

function dataView(): DataView {
  view ??= new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  return view;
}

function assertBounds(): void {
  if (pos > buf.length) throw new RangeError("premature EOF");
}

/** protobuf-es's tag: a varint of at most 32 bits, a field number above 0, a wire type up to 5. */
function readTag(): number {
  const start = pos;
  const tag = readVarint32();
  const read = pos - start;
  if (read > 5 || (read === 5 && buf[pos - 1]! > 0x0f)) throw new Error("illegal tag: varint overflows uint32");
  const no = tag >>> 3;
  const wireType = tag & 7;
  if (no <= 0 || wireType > 5) throw new Error(`illegal tag: field no ${no} wire type ${wireType}`);
  return tag;
}

/** A varint read as protobuf-es's `varint32read`: its low 32 bits, up to 10 bytes, as unsigned. */
function readVarint32(): number {
  let result = 0;
  for (let shift = 0; shift < 28; shift += 7) {
    const b = buf[pos++]!;
    result |= (b & 0x7f) << shift;
    if ((b & 0x80) === 0) {
      assertBounds();
      return result;
    }
  }
  // The fifth byte gives the top 4 bits; up to five more are read and dropped.
  let b = buf[pos++]!;
  result |= (b & 0x0f) << 28;
  for (let read = 5; (b & 0x80) !== 0 && read < 10; read++) b = buf[pos++]!;
  if ((b & 0x80) !== 0) throw new Error("invalid varint");
  assertBounds();
  return result >>> 0;
}

// The last 64-bit varint or fixed64 read, as two 32-bit halves.
let lo = 0;
let hi = 0;

/** A varint read as protobuf-es's `varint64read`, into `lo` and `hi`. */
function readVarint64(): void {
  lo = 0;
  hi = 0;
  for (let shift = 0; shift < 28; shift += 7) {
    const b = buf[pos++]!;
    lo |= (b & 0x7f) << shift;
    if ((b & 0x80) === 0) {
      assertBounds();
      return;
    }
  }
  // The fifth byte: 4 bits of the low half, 3 of the high one.
  const middle = buf[pos++]!;
  lo |= (middle & 0x0f) << 28;
  hi = (middle & 0x70) >> 4;
  if ((middle & 0x80) === 0) {
    assertBounds();
    return;
  }
  for (let shift = 3; shift <= 31; shift += 7) {
    const b = buf[pos++]!;
    hi |= (b & 0x7f) << shift;
    if ((b & 0x80) === 0) {
      assertBounds();
      return;
    }
  }
  throw new Error("invalid varint");
}

/** An unknown field's bytes, skipped as protobuf-es's `BinaryReader.skip` skips them. */
function skip(wireType: number, no: number, recursionLimit: number): Uint8Array {
  const start = pos;
  switch (wireType) {
    case 0:
      while (buf[pos++]! & 0x80) {}
      break;
    case 1:
      pos += 8;
      break;
    case 5:
      pos += 4;
      break;
    case 2: {
      // Read first: \`pos += readVarint32()\` would add to the position before the length.
      const length = readVarint32();
      pos += length;
      break;
    }
    case 3:
      if (recursionLimit <= 0) throw new Error("maximum recursion depth reached");
      for (;;) {
        const tag = readTag();
        const fieldNo = tag >>> 3;
        const type = tag & 7;
        if (type === 4) {
          if (fieldNo !== no) throw new Error("invalid end group tag");
          break;
        }
        skip(type, fieldNo, recursionLimit - 1);
      }
      break;
    default:
      throw new Error(`cant skip wire type ${wireType}`);
  }
  assertBounds();
  return buf.subarray(start, pos);
}

// ---- google.protobuf.Struct held as JSON, converted as protobuf-es converts it.

type StructMessage = Message & { fields: Record<string, ValueMessage> };
type ValueMessage = { kind: { case: string | undefined; value?: unknown } };

function structToJson(struct: Message): Record<string, unknown> {
  const json: Record<string, unknown> = {};
  for (const [key, value] of Object.entries((struct as StructMessage).fields)) setOwn(json, key, valueToJson(value));
  return json;
}

function valueToJson(value: ValueMessage): unknown {
  switch (value.kind.case) {
    case "structValue":
      return structToJson(value.kind.value as Message);
    case "listValue":
      return ((value.kind.value as { values: ValueMessage[] }).values ?? []).map(valueToJson);
    case "nullValue":
    case undefined:
      return null;
    default:
      return value.kind.value;
  }
}

function structFromJson(json: unknown): Message {
  const struct = { $typeName: "google.protobuf.Struct", fields: {} as Record<string, unknown> };
  if (json !== null && typeof json === "object" && !Array.isArray(json)) {
    for (const [key, value] of Object.entries(json)) setOwn(struct.fields, key, valueFromJson(value));
  }
  return struct;
}

function valueFromJson(json: unknown): unknown {
  const value = { $typeName: "google.protobuf.Value", kind: { case: undefined } as { case: string | undefined; value?: unknown } };
  switch (typeof json) {
    case "number":
      value.kind = { case: "numberValue", value: json };
      break;
    case "string":
      value.kind = { case: "stringValue", value: json };
      break;
    case "boolean":
      value.kind = { case: "boolValue", value: json };
      break;
    case "object":
      if (json === null) value.kind = { case: "nullValue", value: 0 };
      else if (Array.isArray(json)) {
        value.kind = { case: "listValue", value: { $typeName: "google.protobuf.ListValue", values: json.map(valueFromJson) } };
      } else value.kind = { case: "structValue", value: structFromJson(json) };
      break;
  }
  return value;
}
