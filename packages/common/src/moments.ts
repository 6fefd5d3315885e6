import { create } from "@bufbuild/protobuf";
import { TimestampSchema, type Timestamp } from "@bufbuild/protobuf/wkt";
import { invalidArgument } from "./errors.js";

// Moments in time as the API takes and gives them: ISO 8601 text with a time zone at the edge,
// google.protobuf.Timestamp over RPC, and microseconds since the epoch (bigint) inside, which is
// Postgres's own precision, so a moment goes to a query and comes back without rounding.

/** ISO 8601 with a time zone, so the moment is unambiguous; seconds and up to 9 fraction digits optional. */
const ISO_TIME = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?(?:Z|([+-])(\d{2}):(\d{2}))$/;

/** The first and last seconds a Timestamp may hold: 0001-01-01T00:00:00Z and 9999-12-31T23:59:59Z. */
const MIN_SECONDS = -62_135_596_800n;
const MAX_SECONDS = 253_402_300_799n;

/**
 * The moment an ISO 8601 time names (`2026-12-01T12:00:00Z`, `2026-12-01T13:00:00.123456+01:00`),
 * to the nanosecond; undefined for text that is not one, or names a day or hour that does not exist.
 */
export function parseIsoTime(raw: string): Timestamp | undefined {
  const m = ISO_TIME.exec(raw);
  if (!m) return undefined;
  const [year, month, day, hour, minute, second] = [m[1], m[2], m[3], m[4], m[5], m[6] ?? "0"].map(Number) as [
    number,
    number,
    number,
    number,
    number,
    number,
  ];
  const offsetMinutes = m[8] ? (m[8] === "-" ? -1 : 1) * (Number(m[9]) * 60 + Number(m[10])) : 0;
  if (hour > 23 || minute > 59 || second > 59 || Number(m[9] ?? 0) > 23 || Number(m[10] ?? 0) > 59) return undefined;
  // setUTCFullYear, not Date.UTC, which reads the years 0 to 99 as 1900 to 1999.
  const date = new Date(0);
  date.setUTCFullYear(year, month - 1, day);
  if (date.getUTCFullYear() !== year || date.getUTCMonth() !== month - 1 || date.getUTCDate() !== day) return undefined;
  date.setUTCHours(hour, minute, second, 0);
  const seconds = BigInt(date.getTime() / 1000 - offsetMinutes * 60);
  if (seconds < MIN_SECONDS || seconds > MAX_SECONDS) return undefined;
  return create(TimestampSchema, { seconds, nanos: Number((m[7] ?? "").padEnd(9, "0")) });
}

/**
 * A Timestamp from a request as microseconds, or 400 `invalid_request` naming `field` when it is
 * missing or not a valid moment. Nanoseconds round up to the next microsecond: every stored moment
 * is a whole microsecond, so "before T" and "from T on" select the same rows either way.
 */
export function requireMoment(ts: Timestamp | undefined, field: string): bigint {
  if (!ts) throw invalidArgument(`${field} is required: an ISO 8601 time such as 2026-12-01T12:00:00Z`, { field });
  if (ts.seconds < MIN_SECONDS || ts.seconds > MAX_SECONDS || !Number.isInteger(ts.nanos) || ts.nanos < 0 || ts.nanos > 999_999_999) {
    throw invalidArgument(`${field} must be a time from year 1 to 9999`, { field });
  }
  return ts.seconds * 1_000_000n + BigInt(Math.ceil(ts.nanos / 1000));
}

/** The Timestamp of a moment in microseconds since the epoch. */
export function timestampOfMicros(micros: bigint): Timestamp {
  let seconds = micros / 1_000_000n;
  let rest = micros % 1_000_000n;
  if (rest < 0n) {
    seconds -= 1n;
    rest += 1_000_000n;
  }
  return create(TimestampSchema, { seconds, nanos: Number(rest) * 1000 });
}

/** ISO 8601 UTC of a Timestamp, to the microsecond: `2026-12-01T12:00:00.123456Z`. */
export function isoMicros(ts: Timestamp): string {
  const whole = new Date(Number(ts.seconds) * 1000).toISOString();
  return `${whole.slice(0, -5)}.${String(Math.floor(ts.nanos / 1000)).padStart(6, "0")}Z`;
}
