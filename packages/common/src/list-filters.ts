import type { JsonObject } from "@bufbuild/protobuf";
import type { Timestamp } from "@bufbuild/protobuf/wkt";
import { invalidArgument } from "./errors.js";
import { METADATA_MAX_KEY_LENGTH } from "./metadata.js";

// The bounds of the filters lists take (docs/api.md#filters): creation time and top-level metadata
// values. The gateway checks them on query parameters and each RPC handler on its fields, so both
// edges refuse the same input, each naming it its own way.

/** Most `metadata[KEY]=VALUE` filters one list request takes. */
export const MAX_METADATA_FILTERS = 10;
/** Longest value of a metadata filter, in characters (keys are bounded as metadata keys are). */
export const METADATA_FILTER_MAX_VALUE_LENGTH = 1_000;

/** The filters of a list request, as its RPC message carries them. */
export interface ListFilters {
  createdAfter?: Timestamp | undefined;
  createdBefore?: Timestamp | undefined;
  /** Metadata key to the value it must have. */
  metadata: Record<string, string>;
}

/** How a refusal names the filter it refused, in `details`. */
export interface FilterPlaces {
  /** One key's filter, or (no key) the metadata filters as a whole. */
  metadata(key?: string): JsonObject;
  time(name: "created_after" | "created_before"): JsonObject;
}

/** The REST names: `created_after`, `metadata[KEY]`. */
export const FILTER_QUERY_PARAMETERS: FilterPlaces = {
  metadata: (key) => ({ parameter: key === undefined ? "metadata" : `metadata[${key}]` }),
  time: (name) => ({ parameter: name }),
};

/** The RPC names: `created_after`, `metadata.KEY`. */
export const FILTER_RPC_FIELDS: FilterPlaces = {
  metadata: (key) => ({ field: key === undefined ? "metadata" : `metadata.${key}` }),
  time: (name) => ({ field: name }),
};

/**
 * Refuses filters out of bounds with 400 `invalid_request`: at most MAX_METADATA_FILTERS metadata
 * filters, keys of 1 to METADATA_MAX_KEY_LENGTH characters (not `__proto__`, which no stored
 * metadata holds), values of at most METADATA_FILTER_MAX_VALUE_LENGTH; times of years 1 to 9999,
 * `created_after` earlier than `created_before` when both are given.
 */
export function checkListFilters(filters: ListFilters, places: FilterPlaces): void {
  checkMetadataFilters(filters.metadata, places);
  checkCreatedRange(filters.createdAfter, filters.createdBefore, places);
}

/** The earliest and latest instants a time filter takes: years 1 to 9999, as RFC 3339 writes them. */
const MIN_SECONDS = -62_135_596_800n; // 0001-01-01T00:00:00Z
const MAX_SECONDS = 253_402_300_799n; // 9999-12-31T23:59:59Z

function checkMetadataFilters(filters: Record<string, string>, places: FilterPlaces): void {
  const keys = Object.keys(filters);
  if (keys.length > MAX_METADATA_FILTERS) {
    throw invalidArgument(
      `at most ${MAX_METADATA_FILTERS} metadata filters may be given; got ${keys.length}`,
      Object.assign({}, places.metadata(), {
        max_filters: MAX_METADATA_FILTERS,
      }),
    );
  }
  for (const key of keys) {
    if (key === "") throw invalidArgument("a metadata filter needs a key, as in metadata[KEY]=VALUE", places.metadata());
    if (key.length > METADATA_MAX_KEY_LENGTH) {
      throw invalidArgument(
        `metadata filter keys must be at most ${METADATA_MAX_KEY_LENGTH} characters`,
        Object.assign({}, places.metadata(), {
          max_key_length: METADATA_MAX_KEY_LENGTH,
        }),
      );
    }
    if (key === "__proto__") throw invalidArgument('metadata filter keys must not be "__proto__"', places.metadata());
    if (filters[key]!.length > METADATA_FILTER_MAX_VALUE_LENGTH) {
      throw invalidArgument(
        `metadata filter values must be at most ${METADATA_FILTER_MAX_VALUE_LENGTH} characters`,
        Object.assign({}, places.metadata(key), {
          max_value_length: METADATA_FILTER_MAX_VALUE_LENGTH,
        }),
      );
    }
  }
}

/** Longest text the entity list's `name` filter takes, in characters, after trimming. */
export const NAME_FILTER_MAX_LENGTH = 100;

/**
 * The text of a `name` filter (entities whose name contains it, in any case), trimmed; 400
 * `invalid_request` naming `place` when that leaves nothing or more than NAME_FILTER_MAX_LENGTH
 * characters. An absent filter is not checked here: only a given one, even empty, is refused.
 */
export function checkNameFilter(value: string, place: JsonObject): string {
  const text = value.trim();
  if (text === "" || text.length > NAME_FILTER_MAX_LENGTH) {
    throw invalidArgument(
      `name must be 1 to ${NAME_FILTER_MAX_LENGTH} characters (leading and trailing spaces aside)`,
      Object.assign({}, place, { max_length: NAME_FILTER_MAX_LENGTH }),
    );
  }
  return text;
}

function checkCreatedRange(after: Timestamp | undefined, before: Timestamp | undefined, places: FilterPlaces): void {
  for (const [name, ts] of [
    ["created_after", after],
    ["created_before", before],
  ] as const) {
    if (ts && (ts.seconds < MIN_SECONDS || ts.seconds > MAX_SECONDS || ts.nanos < 0 || ts.nanos > 999_999_999)) {
      throw invalidArgument(`${name} must be a time from year 1 to year 9999`, places.time(name));
    }
  }
  if (after && before && (after.seconds > before.seconds || (after.seconds === before.seconds && after.nanos >= before.nanos))) {
    throw invalidArgument("created_after must be earlier than created_before", places.time("created_after"));
  }
}
