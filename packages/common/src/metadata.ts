import type { JsonObject } from "@bufbuild/protobuf";
import { invalidArgument } from "./errors.js";

// Limits of client metadata (gateway/openapi.yaml, Metadata). Metadata travels as a
// google.protobuf.Struct, where each level of nesting costs two messages (Struct and Value, or
// Value and ListValue), and protobuf refuses to decode more than 100 nested messages. Sixteen
// levels stay far below that whatever message wraps them (an event, a list response).

/** Most levels of nesting; `{"a": 1}` is one level, `{"a": {"b": [1]}}` three. */
export const METADATA_MAX_DEPTH = 16;
/** Most bytes of the metadata as compact UTF-8 JSON. */
export const METADATA_MAX_BYTES = 16 * 1024;
/** Longest key, in characters. */
export const METADATA_MAX_KEY_LENGTH = 256;

/**
 * The one check of client metadata, at every edge that takes it (the REST gateway before it builds
 * a protobuf message, each RPC handler for callers that skip the gateway). Absent or null reads as
 * undefined. Anything else must be a JSON object within the limits above, with no NUL character
 * (Postgres cannot store one in jsonb) and only finite numbers. The walk is iterative and stops at
 * the first level too deep, so no input can exhaust the stack.
 */
export function parseMetadata(value: unknown, field = "metadata"): JsonObject | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "object" || Array.isArray(value)) throw invalidArgument(`${field} must be a JSON object`, { field });
  for (const { node, depth, key } of jsonNodes(value)) {
    if (key !== undefined && key.length > METADATA_MAX_KEY_LENGTH) {
      throw invalidArgument(`${field} keys must be at most ${METADATA_MAX_KEY_LENGTH} characters`, {
        field,
        max_key_length: METADATA_MAX_KEY_LENGTH,
      });
    }
    // protobuf-es builds a Struct's fields by assignment, so a key "__proto__" replaces the
    // object's prototype instead of becoming a field: the value would vanish without a word.
    if (key === "__proto__") throw invalidArgument(`${field} keys must not be "__proto__"`, { field });
    if (key?.includes("\u0000") || (typeof node === "string" && node.includes("\u0000"))) {
      throw invalidArgument(`${field} must not contain NUL characters`, { field });
    }
    if (typeof node === "number" && !Number.isFinite(node)) throw invalidArgument(`${field} numbers must be finite`, { field });
    if (typeof node === "object" && node !== null && depth > METADATA_MAX_DEPTH) {
      throw invalidArgument(`${field} must be nested at most ${METADATA_MAX_DEPTH} levels deep`, { field, max_depth: METADATA_MAX_DEPTH });
    }
  }
  // Safe to serialize now: the depth is bounded.
  if (Buffer.byteLength(JSON.stringify(value), "utf8") > METADATA_MAX_BYTES) {
    throw invalidArgument(`${field} must be at most ${METADATA_MAX_BYTES / 1024} KiB of JSON`, { field, max_bytes: METADATA_MAX_BYTES });
  }
  return value as JsonObject;
}

/** What stored metadata deeper than the limit is returned as, in responses and events. */
const OMITTED_METADATA: JsonObject = {
  metadata_omitted: `the stored metadata is nested deeper than ${METADATA_MAX_DEPTH} levels, the most a response or event carries`,
};

/**
 * Stored metadata as responses and events carry it. Rows written before the depth limit existed
 * may be nested deeper than protobuf can decode; such metadata is replaced by OMITTED_METADATA
 * (it stays in the database untouched), so a read or an event never fails because of it.
 * Everything else is returned as stored.
 */
export function storedMetadata(value: JsonObject): JsonObject {
  return depthExceeds(value, METADATA_MAX_DEPTH) ? OMITTED_METADATA : value;
}

/**
 * Every value inside `value` with its depth (an object or array at the top is depth 1, its members
 * depth 2) and, for object members, its key. Iterative, and a node's members are only visited
 * after the caller has looked at the node, so stopping at a node too deep never walks below it.
 */
function* jsonNodes(value: unknown): Generator<{ node: unknown; depth: number; key?: string }> {
  const pending: Array<{ node: unknown; depth: number; key?: string }> = [{ node: value, depth: 1 }];
  while (pending.length > 0) {
    const entry = pending.pop()!;
    yield entry;
    const { node, depth } = entry;
    if (Array.isArray(node)) {
      for (const item of node) pending.push({ node: item, depth: depth + 1 });
    } else if (typeof node === "object" && node !== null) {
      for (const [key, item] of Object.entries(node)) pending.push({ node: item, depth: depth + 1, key });
    }
  }
}

function depthExceeds(value: unknown, max: number): boolean {
  for (const { node, depth } of jsonNodes(value)) {
    if (typeof node === "object" && node !== null && depth > max) return true;
  }
  return false;
}
