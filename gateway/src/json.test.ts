import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { toJson } from "./json.js";

// toJson is on every response's path and written by hand for speed: it must say what
// JSON.stringify says for any JSON value, and print bigints as exact integer literals.
describe("toJson", () => {
  it("writes what JSON.stringify writes for any JSON value", () => {
    fc.assert(
      fc.property(fc.jsonValue(), (value) => {
        expect(toJson(value)).toBe(JSON.stringify(value));
      }),
      { numRuns: 500 },
    );
  });

  it("prints bigints exactly, skips undefined members and writes dates in ISO form", () => {
    const at = new Date(Date.UTC(2026, 0, 2, 3, 4, 5, 6));
    expect(toJson({ a: 9007199254740993n, b: undefined, c: [undefined, -1n], d: at, e: Number.NaN, 'q"uote': "x" })).toBe(
      '{"a":9007199254740993,"c":[null,-1],"d":"2026-01-02T03:04:05.006Z","e":null,"q\\"uote":"x"}',
    );
  });
});
