import { create } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import { TimestampSchema } from "@bufbuild/protobuf/wkt";
import { describe, expect, it } from "vitest";
import { metadataDocuments, microsecondBound, nameContains, nameIndexable, parseNameFilter } from "./list-query.js";

// The pure parts of the lists' filters: what documents a metadata filter matches by containment,
// and the time bounds Postgres compares created_at with. What the lists answer is
// gateway/src/list-filters.test.ts, on a full stack.

describe("metadataDocuments", () => {
  it("matches the string always, and the number or boolean the value spells", () => {
    expect(metadataDocuments("n", "5")).toEqual(['{"n":"5"}', '{"n":5}']);
    expect(metadataDocuments("n", "-2.5e3")).toEqual(['{"n":"-2.5e3"}', '{"n":-2500}']);
    expect(metadataDocuments("b", "true")).toEqual(['{"b":"true"}', '{"b":true}']);
    expect(metadataDocuments("b", "false")).toEqual(['{"b":"false"}', '{"b":false}']);
  });

  it("reads only JSON's own spellings as numbers and booleans, and only finite numbers", () => {
    for (const value of ["05", "+5", "5.", ".5", "0x10", "Infinity", "NaN", "1e400", "True", "", " 5"]) {
      expect(metadataDocuments("k", value), value).toEqual([JSON.stringify({ k: value })]);
    }
  });

  it("writes the number as JavaScript writes it, as every stored number was written", () => {
    expect(metadataDocuments("n", "12345678901234567890")[1]).toBe('{"n":12345678901234567000}');
    expect(metadataDocuments("n", "-0")[1]).toBe('{"n":0}');
  });
});

describe("the name filter", () => {
  it("matches the text anywhere, its LIKE wildcards and escape character taken literally", () => {
    expect(nameContains("ali")).toBe("%ali%");
    expect(nameContains("50%_off\\now")).toBe("%50\\%\\_off\\\\now%");
  });

  it("is trimmed, and refused empty, blank or over 100 characters as invalid_argument naming the field", () => {
    expect(parseNameFilter(undefined)).toBeUndefined();
    expect(parseNameFilter("  Smith ")).toBe("%Smith%");
    expect(parseNameFilter(` ${"x".repeat(100)} `)).toBe(`%${"x".repeat(100)}%`);
    for (const bad of ["", "   ", "x".repeat(101)]) {
      expect(() => parseNameFilter(bad), JSON.stringify(bad)).toThrow(
        expect.objectContaining({ code: Code.InvalidArgument, message: expect.stringContaining("name must be 1 to 100 characters") }),
      );
    }
  });

  it("reads candidates through the trigram index only when the text holds three letters or digits in a row", () => {
    expect(nameIndexable(nameContains("ali"))).toBe(true);
    expect(nameIndexable(nameContains("Zoë"))).toBe(true);
    expect(nameIndexable(nameContains("al"))).toBe(false);
    expect(nameIndexable(nameContains("a-b c%"))).toBe(false);
  });
});

describe("microsecondBound", () => {
  const at = (seconds: bigint, nanos: number) => microsecondBound(create(TimestampSchema, { seconds, nanos }));

  it("rounds up to the microsecond, carrying into the next second", () => {
    expect(at(0n, 0)).toBe("1970-01-01T00:00:00.000000Z");
    expect(at(0n, 1)).toBe("1970-01-01T00:00:00.000001Z");
    expect(at(0n, 123_456_000)).toBe("1970-01-01T00:00:00.123456Z");
    expect(at(0n, 999_999_001)).toBe("1970-01-01T00:00:01.000000Z");
    expect(at(-62_135_596_800n, 0)).toBe("0001-01-01T00:00:00.000000Z");
  });

  it("is infinity past the last microsecond of year 9999", () => {
    expect(at(253_402_300_799n, 999_999_000)).toBe("9999-12-31T23:59:59.999999Z");
    expect(at(253_402_300_799n, 999_999_001)).toBe("infinity");
  });
});
