import { create, type DescMessage, fromBinary, protoInt64, ScalarType, toBinary } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { encodeBinary } from "./proto-binary.js";
import {
  DOUBLES,
  FLOATS,
  INT32,
  INT64,
  randomMessage,
  rng,
  STRINGS,
  scalarValue,
  serviceMessages,
  testSchemas,
  UINT32,
  UINT64,
} from "./proto-binary.testing.js";

// encodeBinary must write exactly what protobuf-es's toBinary writes: for every message of the
// services' protos, and for a test schema with every proto3 field shape (each scalar type singular,
// optional, packed and not, enums, nested and recursive messages, maps of several key types, a
// oneof, Struct, Timestamp, 64-bit fields as strings), a proto2 one (explicit presence, defaults on
// the prototype, unpacked lists), unknown fields, and the edge values of each type.

export function expectSameBytes(desc: DescMessage, message: Record<string, unknown>, label: string) {
  const expected = toBinary(desc, message as never);
  const actual = encodeBinary(desc, message as never);
  if (Buffer.compare(Buffer.from(expected), Buffer.from(actual)) !== 0) {
    throw new Error(
      `${label}: ${desc.typeName} encoded differently\n expected ${Buffer.from(expected).toString("hex")}\n actual   ${Buffer.from(actual).toString("hex")}`,
    );
  }
}

describe("encodeBinary", () => {
  const { all, legacy } = testSchemas();

  it("writes what toBinary writes for every message of the services' protos", () => {
    const messages = serviceMessages();
    expect(messages.length).toBeGreaterThan(50);
    for (const desc of messages) {
      const r = rng(desc.typeName.length * 7919);
      for (let i = 0; i < 40; i++) expectSameBytes(desc, randomMessage(desc, r), `seed case ${i}`);
    }
  });

  it("writes what toBinary writes for every proto3 field shape, at random", () => {
    const r = rng(1);
    for (let i = 0; i < 1000; i++) expectSameBytes(all, randomMessage(all, r), `case ${i}`);
  });

  it("writes each edge value of each scalar type alike, singular, optional and repeated", () => {
    const probe = rng(2);
    for (const field of all.fields) {
      if (field.fieldKind !== "scalar" && field.fieldKind !== "list") continue;
      const scalar = field.scalar;
      if (scalar === undefined) continue;
      const edges =
        scalar === ScalarType.STRING
          ? STRINGS
          : scalar === ScalarType.DOUBLE
            ? DOUBLES
            : scalar === ScalarType.FLOAT
              ? FLOATS
              : scalar === ScalarType.UINT32 || scalar === ScalarType.FIXED32
                ? UINT32
                : scalar === ScalarType.INT64 || scalar === ScalarType.SINT64 || scalar === ScalarType.SFIXED64
                  ? INT64
                  : scalar === ScalarType.UINT64 || scalar === ScalarType.FIXED64
                    ? UINT64
                    : scalar === ScalarType.BOOL
                      ? [true, false]
                      : scalar === ScalarType.BYTES
                        ? [new Uint8Array(0), new Uint8Array(200).fill(1)]
                        : INT32;
      for (const edge of edges) {
        const value = field.longAsString && typeof edge === "bigint" ? edge.toString() : edge;
        const message = create(all) as unknown as Record<string, unknown>;
        message[field.oneof ? field.oneof.localName : field.localName] = field.oneof
          ? { case: field.localName, value }
          : field.fieldKind === "list"
            ? [value, scalarValue(scalar, probe, field.longAsString), value]
            : value;
        expectSameBytes(all, message, `${field.name} = ${String(edge)}`);
      }
    }
  });

  it("writes a Struct given as JSON as toBinary does, a parsed `__proto__` key included", () => {
    for (const text of ['{"__proto__": {"a": 1}, "b": 2}', '{"b": [1, {"__proto__": null}], "2": "x", "1": true}', "{}"]) {
      const message = create(all) as unknown as Record<string, unknown>;
      message["metadata"] = JSON.parse(text);
      expectSameBytes(all, message, text);
    }
  });

  it("writes what toBinary writes for proto2: explicit presence, defaults, unpacked lists", () => {
    const r = rng(3);
    expectSameBytes(legacy, create(legacy) as never, "empty");
    expectSameBytes(legacy, create(legacy, { count: 5, name: "x" } as never) as never, "set to the defaults");
    for (let i = 0; i < 500; i++) expectSameBytes(legacy, randomMessage(legacy, r), `case ${i}`);
  });

  it("writes unknown fields back after the known ones, as toBinary does", () => {
    const r = rng(4);
    for (let i = 0; i < 300; i++) {
      const bytes = toBinary(all, randomMessage(all, r) as never);
      const partial = fromBinary(all, bytes) as unknown as Record<string, unknown>;
      partial["$unknown"] = [
        { no: 500, wireType: 0, data: new Uint8Array([0x96, 0x01]) },
        { no: 501, wireType: 2, data: new Uint8Array([2, 65, 66]) },
      ];
      expectSameBytes(all, partial, `case ${i}`);
    }
  });

  it("refuses the values toBinary refuses", () => {
    const bad: [string, unknown][] = [
      ["s_int32", 2 ** 31],
      ["s_int32", 1.5],
      ["s_uint32", -1],
      ["s_int64", 2n ** 63n],
      ["s_uint64", -1n],
      ["s_float", 1e39],
      ["long_string", "12x"],
    ];
    for (const [name, value] of bad) {
      const message = create(all) as unknown as Record<string, unknown>;
      message[name.replace(/_(\w)/g, (_, c: string) => c.toUpperCase())] = value;
      expect(() => toBinary(all, message as never), name).toThrow();
      expect(() => encodeBinary(all, message as never), name).toThrow();
    }
  });

  it("answers a fresh buffer each time: an earlier answer is never overwritten", () => {
    const r = rng(5);
    const first = randomMessage(all, r);
    const a = encodeBinary(all, first as never);
    const copy = Buffer.from(a);
    for (let i = 0; i < 50; i++) encodeBinary(all, randomMessage(all, r) as never);
    expect(Buffer.compare(Buffer.from(a), copy)).toBe(0);
    expect(fromBinary(all, a)).toEqual(fromBinary(all, toBinary(all, first as never)));
  });

  it("decodes back to the message for 64-bit values at and past 2^53", () => {
    for (const value of [protoInt64.parse("9007199254740993"), -1n, 2n ** 62n]) {
      const message = create(all, { sInt64: value } as never);
      expect((fromBinary(all, encodeBinary(all, message)) as unknown as { sInt64: bigint }).sInt64).toBe(value);
    }
  });
});
