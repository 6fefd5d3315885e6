import { create, type JsonObject } from "@bufbuild/protobuf";
import { TimestampSchema, type Timestamp } from "@bufbuild/protobuf/wkt";
import {
  checkListFilters,
  FILTER_QUERY_PARAMETERS,
  invalidArgument,
  MAX_AMOUNT,
  MAX_PAGE_SIZE,
  parseMetadata,
  type ListFilters,
} from "@ledger/common";

/** A parsed JSON body or query string, with the names it may contain. */
export type Fields = Record<string, unknown>;

/**
 * Refuses names the endpoint does not know: a typo such as `ammount` must not pass silently. In a
 * query, `metadata[KEY]` is known where `metadata` is (the filters, gateway/openapi.yaml).
 */
export function onlyKnown(fields: Fields, known: readonly string[], where: "body" | "query"): void {
  for (const name of Object.keys(fields)) {
    if (!known.includes(where === "query" && METADATA_PARAMETER.test(name) ? "metadata" : name)) {
      const noun = where === "body" ? "field" : "query parameter";
      throw invalidArgument(`unknown ${noun} ${JSON.stringify(name)}; expected one of: ${known.join(", ")}`, {
        [where === "body" ? "field" : "parameter"]: name,
      });
    }
  }
}

/** A string field; absent or null reads as "", which the service treats as not given. */
export function stringField(fields: Fields, name: string): string {
  const value = fields[name];
  if (value === undefined || value === null) return "";
  if (typeof value !== "string") throw invalidArgument(`${name} must be a string`, { field: name });
  return value;
}

/** A string field that may be left out: undefined when absent or null, so an update leaves it as it is. */
export function optionalStringField(fields: Fields, name: string): string | undefined {
  const value = fields[name];
  return value === undefined || value === null ? undefined : stringField(fields, name);
}

/**
 * An amount: a JSON integer in minor units, 1 to MAX_AMOUNT (2^53-1). Floats, strings, zero and negatives are
 * refused here with the field's name; an absent amount reads as 0 and the service says it is required.
 */
export function amountField(fields: Fields, name: string): bigint {
  const value = fields[name];
  if (value === undefined || value === null) throw invalidArgument(`${name} is required`, { field: name });
  if (typeof value !== "number")
    throw invalidArgument(`${name} must be an integer number of minor units, not a ${typeName(value)}`, { field: name });
  if (!Number.isInteger(value)) throw invalidArgument(`${name} must be an integer number of minor units`, { field: name });
  if (value <= 0) throw invalidArgument(`${name} must be greater than zero`, { field: name });
  const amount = BigInt(value);
  if (amount > MAX_AMOUNT || !Number.isSafeInteger(value)) throw invalidArgument(`${name} must be at most ${MAX_AMOUNT}`, { field: name });
  return amount;
}

/**
 * An overdraft limit: a JSON integer in minor units, 0 to MAX_AMOUNT (2^53-1); undefined when absent
 * or null, so that an update can leave the limit as it is.
 */
export function overdraftLimitField(fields: Fields, name = "overdraft_limit"): bigint | undefined {
  const value = fields[name];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "number" || !Number.isInteger(value))
    throw invalidArgument(`${name} must be an integer number of minor units`, { field: name });
  if (value < 0) throw invalidArgument(`${name} must be zero or more`, { field: name });
  if (!Number.isSafeInteger(value)) throw invalidArgument(`${name} must be at most ${MAX_AMOUNT}`, { field: name });
  return BigInt(value);
}

/** The `metadata` field, within the limits every edge enforces (checked before any protobuf is built). */
export function metadataField(fields: Fields): JsonObject | undefined {
  return parseMetadata(fields["metadata"], "metadata");
}

/** A JSON object field such as `account`. */
export function objectField(fields: Fields, name: string): JsonObject | undefined {
  const value = fields[name];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "object" || Array.isArray(value)) throw invalidArgument(`${name} must be a JSON object`, { field: name });
  return value as JsonObject;
}

/** An array field. */
export function arrayField(fields: Fields, name: string): unknown[] | undefined {
  const value = fields[name];
  if (value === undefined || value === null) return undefined;
  if (!Array.isArray(value)) throw invalidArgument(`${name} must be an array`, { field: name });
  return value;
}

/** A boolean field. */
export function booleanField(fields: Fields, name: string): boolean | undefined {
  const value = fields[name];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "boolean") throw invalidArgument(`${name} must be true or false`, { field: name });
  return value;
}

/** `limit` from a query string: a whole number 1 to 100, or absent (0 asks for the default). */
export function limitParam(query: Fields): number {
  const raw = query["limit"];
  if (raw === undefined) return 0;
  if (typeof raw !== "string" || !/^\d{1,4}$/.test(raw) || Number(raw) < 1 || Number(raw) > MAX_PAGE_SIZE) {
    throw invalidArgument(`limit must be a whole number from 1 to ${MAX_PAGE_SIZE}`, { parameter: "limit" });
  }
  return Number(raw);
}

/** A required query parameter. */
export function requiredParam(query: Fields, name: string): string {
  const value = query[name];
  if (typeof value !== "string" || value === "") throw invalidArgument(`query parameter ${name} is required`, { parameter: name });
  return value;
}

/** An optional query parameter. */
export function optionalParam(query: Fields, name: string): string {
  const value = query[name];
  return typeof value === "string" ? value : "";
}

/**
 * Turns a query string into fields; a repeated parameter is refused rather than guessed at, and so
 * is a NUL character (`%00`) in a name or value, which Postgres text cannot hold.
 */
export function parseQuery(search: URLSearchParams): Fields {
  const fields: Fields = {};
  for (const [name, value] of search) {
    if (name.includes("\u0000")) throw invalidArgument("query parameter names must not contain NUL characters");
    if (value.includes("\u0000")) throw invalidArgument(`query parameter ${name} must not contain NUL characters`, { parameter: name });
    if (name in fields) throw invalidArgument(`query parameter ${name} is given more than once`, { parameter: name });
    fields[name] = value;
  }
  return fields;
}

/** A metadata filter's query parameter, `metadata[KEY]`; the key is everything between the outer brackets. */
const METADATA_PARAMETER = /^metadata\[(.*)\]$/s;

/**
 * The filters of a list query (docs/api.md#filters): `created_after` and `created_before` (ISO 8601
 * times) and `metadata[KEY]=VALUE`, checked within the bounds the ledger checks, and named as
 * query parameters when refused.
 */
export function listFilterParams(query: Fields): ListFilters {
  // No prototype, so a key `__proto__` is kept as a key (and refused) rather than lost.
  const filters: ListFilters = { metadata: Object.create(null) as Record<string, string> };
  for (const [name, value] of Object.entries(query)) {
    if (name === "metadata") throw invalidArgument("metadata filters are written metadata[KEY]=VALUE", { parameter: name });
    const key = METADATA_PARAMETER.exec(name)?.[1];
    if (key !== undefined) filters.metadata[key] = value as string;
  }
  for (const name of ["created_after", "created_before"] as const) {
    const raw = optionalParam(query, name);
    if (raw === "") continue;
    const time = parseIsoTime(raw);
    if (!time) throw invalidArgument(`${name} must be an ISO 8601 time with a time zone, like 2026-12-01T12:00:00Z`, { parameter: name });
    if (name === "created_after") filters.createdAfter = time;
    else filters.createdBefore = time;
  }
  checkListFilters(filters, FILTER_QUERY_PARAMETERS);
  return filters;
}

/** ISO 8601 with a time zone, so the moment is unambiguous; seconds and their fraction optional. */
const ISO_TIME = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?(?:Z|([+-])(\d{2}):(\d{2}))$/;

/**
 * An ISO 8601 time with a time zone (`2026-12-01T12:00:00Z`, `2026-12-01T13:00:00.123456+01:00`)
 * as a Timestamp, to the nanosecond; undefined when it is not one or names no real time (a 30
 * February, a 24th hour). The year is taken as written, 0000 included: bounds are the caller's.
 */
export function parseIsoTime(raw: string): Timestamp | undefined {
  const m = ISO_TIME.exec(raw);
  if (!m) return undefined;
  const part = (i: number) => Number(m[i] ?? 0);
  const [year, month, day, hour, minute, second] = [part(1), part(2), part(3), part(4), part(5), part(6)];
  const leap = (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0;
  const daysInMonth = [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][month - 1] ?? 0;
  if (day < 1 || day > daysInMonth || hour > 23 || minute > 59 || second > 59 || part(9) > 23 || part(10) > 59) return undefined;
  // setUTCFullYear, not Date.UTC, which reads years 0 to 99 as 1900 to 1999.
  const date = new Date(0);
  date.setUTCFullYear(year, month - 1, day);
  date.setUTCHours(hour, minute, second, 0);
  const offsetSeconds = (m[8] === "-" ? -1 : 1) * (part(9) * 3600 + part(10) * 60);
  const nanos = Number((m[7] ?? "").padEnd(9, "0"));
  return create(TimestampSchema, { seconds: BigInt(date.getTime() / 1000 - offsetSeconds), nanos });
}

/** Requires the parsed body to be a JSON object. */
export function asObject(body: unknown): Fields {
  if (typeof body !== "object" || body === null || Array.isArray(body)) {
    throw invalidArgument("the request body must be a JSON object");
  }
  return body as Fields;
}

function typeName(value: unknown): string {
  if (Array.isArray(value)) return "array";
  return value === null ? "null" : typeof value;
}
