import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { ConnectError } from "@connectrpc/connect";
import { parseRequestJson, toJson } from "./json.js";

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

// parseRequestJson is on every request's path: it must read what JSON.parse reads, and refuse
// only a key given twice in one object or a NUL character, whatever the strings hold (quotes,
// backslashes, colons, escapes) that its quick count of members steps over.
describe("parseRequestJson", () => {
  const refusal = (text: string) => {
    try {
      parseRequestJson(text);
    } catch (err) {
      return err instanceof ConnectError ? err.rawMessage : `not a ConnectError: ${String(err)}`;
    }
    return undefined;
  };

  it("reads any JSON text as JSON.parse does, and refuses it only when a string or key holds NUL", () => {
    fc.assert(
      // Any character in strings and keys (NUL, quotes, backslashes, colons, lone surrogates).
      fc.property(fc.jsonValue({ stringUnit: "binary" }), (value) => {
        const text = JSON.stringify(value);
        // Without its escaped backslashes, a `\u0000` left in the text is a NUL.
        if (text.replaceAll("\\\\", "").includes("\\u0000")) expect(refusal(text)).toMatch(/NUL/);
        else expect(parseRequestJson(text)).toEqual(JSON.parse(text));
      }),
      { numRuns: 2_000 },
    );
  });

  it("refuses a key given twice in any object, however it is spelt, naming it and where it is", () => {
    fc.assert(
      fc.property(fc.jsonValue({ stringUnit: "binary" }), fc.string({ unit: "binary" }), fc.jsonValue(), (inner, key, other) => {
        // The same key twice, the second time with every character escaped.
        const escaped = `"${key
          .split("")
          .map((ch) => `\\u${ch.charCodeAt(0).toString(16).padStart(4, "0")}`)
          .join("")}"`;
        const text = `{"outer":[1,{${JSON.stringify(key)}:${JSON.stringify(inner)},${escaped}:${JSON.stringify(other)}}]}`;
        expect(refusal(text)).toBe(`the request body gives the key ${JSON.stringify(key)} twice in outer[1]; give each key once`);
      }),
      { numRuns: 1_000 },
    );
    expect(refusal('{"a":1,"b":{"c":2},"a":3}')).toBe('the request body gives the key "a" twice; give each key once');
  });

  it("names the string that holds NUL by its path", () => {
    expect(refusal('{"a":[{"b":"x\\u0000"}]}')).toBe("a[0].b must not contain NUL characters");
    expect(refusal('{"a":{"b\\u0000":1}}')).toBe("keys of a must not contain NUL characters");
    // An escaped backslash before u0000 is text, not NUL.
    expect(parseRequestJson('{"a":"\\\\u0000"}')).toEqual({ a: "\\u0000" });
  });
});
