import { create, type DescMessage, fromBinary, toBinary } from "@bufbuild/protobuf";
import { StructSchema } from "@bufbuild/protobuf/wkt";
import { EventSchema } from "@ledger/proto/events/v1/events_pb.js";
import { describe, expect, it } from "vitest";
import { decodeBinary } from "./proto-binary-decode.js";
import { randomMessage, type Rng, rng, serviceMessages, testSchemas } from "./proto-binary.testing.js";

// decodeBinary must give what protobuf-es's fromBinary gives for the same bytes: the same message
// (types included: bigint or string, Uint8Array, JSON for Struct fields, unknown fields), and an
// error exactly where fromBinary throws. Valid input comes from random messages; damaged input from
// cutting, flipping, inserting and repeating bytes of it.

/** What `decode` answers: its message, or the error it throws. */
function outcome(decode: () => unknown): { message: unknown } | { error: unknown } {
  try {
    return { message: decode() };
  } catch (error) {
    return { error };
  }
}

/** Both decoders on `bytes`: both throw, or both answer the same message. */
function expectSameDecoding(desc: DescMessage, bytes: Uint8Array, label: string): "decoded" | "refused" {
  const expected = outcome(() => fromBinary(desc, bytes));
  const actual = outcome(() => decodeBinary(desc, bytes));
  const hex = Buffer.from(bytes).toString("hex");
  if ("error" in expected || "error" in actual) {
    if ("message" in expected)
      throw new Error(`${label}: decodeBinary refused what fromBinary read (${String((actual as { error: unknown }).error)}): ${hex}`);
    if ("message" in actual) throw new Error(`${label}: decodeBinary read what fromBinary refused (${String(expected.error)}): ${hex}`);
    return "refused";
  }
  expect(actual.message, `${label}: ${hex}`).toStrictEqual(expected.message);
  return "decoded";
}

/** `bytes` damaged one way at random. */
function damage(bytes: Uint8Array, r: Rng): Uint8Array {
  const out = Buffer.from(bytes);
  if (out.length === 0) return Uint8Array.from([r.int(256)]);
  const at = r.int(out.length);
  switch (r.int(5)) {
    case 0:
      return out.subarray(0, at);
    case 1:
      out[at] = r.int(256);
      return out;
    case 2:
      out[at] = out[at]! ^ (1 << r.int(8));
      return out;
    case 3:
      return Buffer.concat([out.subarray(0, at), Buffer.from([r.int(256), r.int(256)]), out.subarray(at)]);
    default: {
      // A stretch repeated: fields seen twice (merged messages, appended lists, last scalar wins).
      const end = at + r.int(out.length - at + 1);
      return Buffer.concat([out.subarray(0, end), out.subarray(at, end), out.subarray(end)]);
    }
  }
}

describe("decodeBinary", () => {
  const { all, legacy } = testSchemas();

  it("reads what fromBinary reads for every message of the services' protos", () => {
    for (const desc of serviceMessages()) {
      const r = rng(desc.typeName.length * 104729);
      for (let i = 0; i < 40; i++) expectSameDecoding(desc, toBinary(desc, randomMessage(desc, r) as never), `case ${i}`);
    }
  });

  it("reads what fromBinary reads for every proto3 field shape and for proto2, at random", () => {
    const r = rng(11);
    for (let i = 0; i < 300; i++) expectSameDecoding(all, toBinary(all, randomMessage(all, r) as never), `case ${i}`);
    for (let i = 0; i < 200; i++) expectSameDecoding(legacy, toBinary(legacy, randomMessage(legacy, r) as never), `proto2 case ${i}`);
  });

  it("refuses exactly the damaged input fromBinary refuses, and reads the rest alike", () => {
    const r = rng(12);
    const outcomes = { decoded: 0, refused: 0 };
    const schemas = [all, legacy, EventSchema, ...serviceMessages().slice(0, 20)];
    for (let i = 0; i < 10000; i++) {
      const desc = schemas[i % schemas.length]!;
      let bytes: Uint8Array = toBinary(desc, randomMessage(desc, r) as never);
      for (let n = 1 + r.int(3); n > 0; n--) bytes = damage(bytes, r);
      outcomes[expectSameDecoding(desc, bytes, `case ${i}`)]++;
    }
    // Both outcomes must have been exercised for the comparison to mean anything.
    expect(outcomes.decoded).toBeGreaterThan(500);
    expect(outcomes.refused).toBeGreaterThan(500);
  });

  it("reads strings as fromBinary does: invalid UTF-8 refused in proto3, replaced in proto2, a leading U+FEFF kept", () => {
    const strings = [
      [0x61, 0x62],
      [0xef, 0xbb, 0xbf, 0x61],
      [0xc3, 0xa9],
      [0xed, 0xa0, 0x80],
      [0xff],
      [0xe2, 0x82],
      [0xf0, 0x9f, 0x98, 0x80],
      [0x61, 0x80, 0x62],
    ];
    for (const s of strings) {
      // Field 9 is All.s_string (proto3); field 2 is Legacy.name (proto2).
      expectSameDecoding(all, Uint8Array.from([(9 << 3) | 2, s.length, ...s]), `proto3 ${s}`);
      expectSameDecoding(legacy, Uint8Array.from([(2 << 3) | 2, s.length, ...s]), `proto2 ${s}`);
    }
    expect(decodeBinary(all, Uint8Array.from([(9 << 3) | 2, 4, 0xef, 0xbb, 0xbf, 0x61]))).toMatchObject({ sString: "\ufeffa" });
    expect(() => decodeBinary(all, Uint8Array.from([(9 << 3) | 2, 1, 0xff]))).toThrow();
  });

  it("merges a message field seen twice, Struct fields included, as fromBinary does", () => {
    const first = toBinary(all, create(all, { child: { sInt32: 1, sString: "a" }, metadata: { a: 1, b: { c: true } } } as never));
    const second = toBinary(all, create(all, { child: { sInt64: 2n, sString: "b" }, metadata: { b: { d: null }, e: [1, "x"] } } as never));
    const both = Buffer.concat([first, second]);
    expectSameDecoding(all, both, "merged");
    expect(decodeBinary(all, both)).toMatchObject({
      child: { sInt32: 1, sInt64: 2n, sString: "b" },
      metadata: { a: 1, b: { d: null }, e: [1, "x"] },
    });
    const struct = toBinary(StructSchema, create(StructSchema, { fields: { k: { kind: { case: "stringValue", value: "v" } } } }));
    expectSameDecoding(StructSchema, Buffer.concat([struct, struct]), "a Struct read as a message");
  });

  it("reads map entries as fromBinary does: `__proto__` an own key, other fields skipped, a message value given twice merged", () => {
    // JSON.parse makes `__proto__` an own key, as a map or Struct decoded from the wire has it.
    const protoKeys = toBinary(
      all,
      create(all, {
        byName: JSON.parse('{"__proto__": 1, "b": 2}'),
        metadata: JSON.parse('{"__proto__": {"a": 1}, "b": 2}'),
      } as never),
    );
    expectSameDecoding(all, protoKeys, "__proto__ keys");
    const decoded = decodeBinary(all, protoKeys) as unknown as Record<string, object>;
    expect(Object.hasOwn(decoded["byName"]!, "__proto__")).toBe(true);
    expect(Object.hasOwn(decoded["metadata"]!, "__proto__")).toBe(true);
    // Field 64 is All.by_name (map<string, int32>): key "k", value 7, then a field 3 whose bytes
    // would read as value 9 were they not skipped.
    const extra = Uint8Array.from([0x82, 0x04, 9, 0x0a, 1, 0x6b, 0x10, 7, 0x1a, 2, 0x10, 9]);
    expectSameDecoding(all, extra, "a map entry's field 3");
    expect(decodeBinary(all, extra)).toMatchObject({ byName: { k: 7 } });
    // Field 66 is All.by_flag (map<bool, All>): key true, then the value in two parts.
    const one = toBinary(all, create(all, { sInt32: 1 } as never));
    const two = toBinary(all, create(all, { sString: "a" } as never));
    const parts = [0x08, 1, 0x12, one.length, ...one, 0x12, two.length, ...two];
    const twice = Uint8Array.from([0x92, 0x04, parts.length, ...parts]);
    expectSameDecoding(all, twice, "a map value given twice");
    expect(decodeBinary(all, twice)).toMatchObject({ byFlag: { true: { sInt32: 1, sString: "a" } } });
  });

  it("refuses nesting past 100 levels, as fromBinary does", () => {
    // Field 62 is All.child: each level a tag, a length and the level below.
    const varint = (n: number) => {
      const out: number[] = [];
      for (; n > 0x7f; n >>>= 7) out.push((n & 0x7f) | 0x80);
      return [...out, n];
    };
    const nest = (levels: number) => {
      let bytes: number[] = [];
      for (let i = 0; i < levels; i++) bytes = [...varint((62 << 3) | 2), ...varint(bytes.length), ...bytes];
      return Uint8Array.from(bytes);
    };
    expect(expectSameDecoding(all, nest(98), "98 deep")).toBe("decoded");
    expect(expectSameDecoding(all, nest(101), "101 deep")).toBe("refused");
  });

  it("decodes the events the services publish", () => {
    const r = rng(13);
    for (let i = 0; i < 300; i++)
      expectSameDecoding(EventSchema, toBinary(EventSchema, randomMessage(EventSchema, r) as never), `event ${i}`);
  });
});
