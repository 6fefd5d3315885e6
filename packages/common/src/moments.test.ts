import { describe, expect, it } from "vitest";
import { isoMicros, parseIsoTime, requireMoment, timestampOfMicros } from "./moments.js";

// Moments at the edge (ISO 8601 text, protobuf Timestamps) and inside (microseconds): exact both
// ways, so a moment the API gave out comes back to the same microsecond.

const micros = (raw: string) => requireMoment(parseIsoTime(raw), "t");

describe("moments", () => {
  it("reads ISO 8601 with a zone exactly, offsets and fractions included", () => {
    expect(parseIsoTime("2026-12-01T12:00:00Z")).toMatchObject({ seconds: 1_796_126_400n, nanos: 0 });
    expect(parseIsoTime("2026-12-01T13:30:00.5+01:30")).toMatchObject({ seconds: 1_796_126_400n, nanos: 500_000_000 });
    expect(parseIsoTime("2026-12-01T11:00-01:00")).toMatchObject({ seconds: 1_796_126_400n, nanos: 0 });
    expect(parseIsoTime("2026-12-01T12:00:00.123456789Z")).toMatchObject({ nanos: 123_456_789 });
    expect(parseIsoTime("0001-01-01T00:00:00Z")).toMatchObject({ seconds: -62_135_596_800n });
    expect(parseIsoTime("0099-03-01T00:00:00Z")!.seconds).toBe(BigInt(Date.parse("0099-03-01T00:00:00Z") / 1000));
  });

  it("refuses text that is not a moment", () => {
    for (const raw of [
      "",
      "2026-12-01",
      "2026-12-01T12:00:00",
      "2026-12-01 12:00:00Z",
      "2026-02-29T00:00:00Z",
      "2026-04-31T00:00:00Z",
      "2026-12-01T24:00:00Z",
      "2026-12-01T12:60:00Z",
      "2026-12-01T12:00:60Z",
      "2026-12-01T12:00:00+24:00",
      "2026-12-01T12:00:00.Z",
      "2026-12-01T12:00:00.1234567890Z",
      "0000-12-31T23:59:59Z",
      "+02026-12-01T12:00:00Z",
    ]) {
      expect(parseIsoTime(raw), raw).toBeUndefined();
    }
    expect(parseIsoTime("2028-02-29T00:00:00Z")).toBeDefined();
  });

  it("turns a Timestamp into microseconds, rounding nanoseconds up, and back to text to the microsecond", () => {
    expect(micros("2026-12-01T12:00:00.000001Z")).toBe(1_796_126_400_000_001n);
    expect(micros("2026-12-01T12:00:00.0000001Z")).toBe(1_796_126_400_000_001n);
    expect(micros("2026-12-01T12:00:00.000001001Z")).toBe(1_796_126_400_000_002n);
    expect(isoMicros(timestampOfMicros(1_796_126_400_000_001n))).toBe("2026-12-01T12:00:00.000001Z");
    expect(isoMicros(timestampOfMicros(micros("1969-12-31T23:59:59.999999Z")))).toBe("1969-12-31T23:59:59.999999Z");
    expect(() => requireMoment(undefined, "from")).toThrow(/from is required/);
    expect(() => requireMoment(timestampOfMicros(0n), "to")).not.toThrow();
    expect(() => requireMoment({ ...timestampOfMicros(0n), nanos: 1_000_000_000 }, "to")).toThrow(/to must be/);
  });
});
