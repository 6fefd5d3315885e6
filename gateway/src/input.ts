import type { DescEnum, JsonObject } from "@bufbuild/protobuf";
import type { Timestamp } from "@bufbuild/protobuf/wkt";
import {
  checkListFilters,
  checkNameFilter,
  enumWords,
  FILTER_QUERY_PARAMETERS,
  invalidArgument,
  MAX_AMOUNT,
  MAX_BALANCE,
  MAX_PAGE_SIZE,
  parseIsoTime,
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

/**
 * A balance threshold: a JSON integer in minor units within ±(2^53-1), the bound of every balance;
 * zero and negatives included (available may go below zero with an overdraft limit).
 */
export function balanceField(fields: Fields, name: string): bigint {
  const value = fields[name];
  if (value === undefined || value === null) throw invalidArgument(`${name} is required`, { field: name });
  if (typeof value !== "number" || !Number.isInteger(value))
    throw invalidArgument(`${name} must be an integer number of minor units`, { field: name });
  if (!Number.isSafeInteger(value)) throw invalidArgument(`${name} must be from -${MAX_BALANCE} to ${MAX_BALANCE}`, { field: name });
  return BigInt(value);
}

/**
 * The proto enum value `word` names in REST (`available` for `BALANCE_ALERT_FIELD_AVAILABLE`);
 * the unset value never is one. Anything else answers 400 `invalid_request` with `details`, which
 * say where `name` was (`field` or `parameter`).
 */
export function enumOfWord<E extends number>(schema: DescEnum, word: string, name: string, details: JsonObject): E {
  const known = [...enumWords(schema)].filter(([number]) => number !== 0);
  const found = known.find(([, each]) => each === word);
  if (!found) throw invalidArgument(`${name} must be one of ${known.map(([, each]) => each).join(", ")}`, details);
  return found[0] as E;
}

/** A required body field naming a proto enum value by its REST word. */
export function enumField<E extends number>(schema: DescEnum, fields: Fields, name: string): E {
  return enumOfWord(schema, stringField(fields, name), name, { field: name });
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

/** `limit` from a query string: a whole number 1 to `max` (100 for lists), or absent (0 asks for the default). */
export function limitParam(query: Fields, max = MAX_PAGE_SIZE): number {
  const raw = query["limit"];
  if (raw === undefined) return 0;
  if (typeof raw !== "string" || !/^\d{1,4}$/.test(raw) || Number(raw) < 1 || Number(raw) > max) {
    throw invalidArgument(`limit must be a whole number from 1 to ${max}`, { parameter: "limit" });
  }
  return Number(raw);
}

const TIME_FORMAT = "an ISO 8601 time with a time zone, like 2026-12-01T12:00:00Z";

/** An ISO 8601 time (`parseIsoTime`) of a body field, or undefined when it is absent or empty. */
export function timeField(fields: Fields, name: string): Timestamp | undefined {
  const raw = stringField(fields, name);
  if (raw === "") return undefined;
  const time = parseIsoTime(raw);
  if (!time) throw invalidArgument(`${name} must be ${TIME_FORMAT}`, { field: name });
  return time;
}

/** An ISO 8601 time (`parseIsoTime`) of a query parameter, or undefined when it is absent. */
export function timeParam(query: Fields, name: string): Timestamp | undefined {
  const raw = query[name];
  if (raw === undefined) return undefined;
  const time = typeof raw === "string" ? parseIsoTime(raw) : undefined;
  if (!time) throw invalidArgument(`${name} must be ${TIME_FORMAT}`, { parameter: name });
  return time;
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

/** The entity list's `name` filter, when the query gives one: checked (even empty) and trimmed. */
export function nameFilterParam(query: Fields): { name?: string } {
  return "name" in query ? { name: checkNameFilter(optionalParam(query, "name"), { parameter: "name" }) } : {};
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
