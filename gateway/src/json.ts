/**
 * JSON text for API responses. Money is bigint inside the services and JSON.stringify throws on
 * bigint, so this writer prints bigints as plain integer literals, exactly, on purpose. It builds
 * one string as it goes and quotes each member name once per process (a batch answer repeats the
 * same few names thousands of times); json.test.ts checks it against JSON.stringify.
 */
export function toJson(value: unknown): string {
  switch (typeof value) {
    case "bigint":
      return value.toString();
    case "string":
      return JSON.stringify(value);
    case "number":
      return Number.isFinite(value) ? String(value) : "null";
    case "boolean":
      return value ? "true" : "false";
    case "object": {
      if (value === null) return "null";
      if (Array.isArray(value)) {
        let out = "[";
        for (let i = 0; i < value.length; i++) {
          if (i > 0) out += ",";
          const item: unknown = value[i];
          out += item === undefined ? "null" : toJson(item);
        }
        return out + "]";
      }
      if (value instanceof Date) return JSON.stringify(value.toISOString());
      let out = "{";
      for (const key in value) {
        if (!Object.hasOwn(value, key)) continue;
        const item = (value as Record<string, unknown>)[key];
        if (item === undefined) continue;
        if (out.length > 1) out += ",";
        out += quoted(key) + ":" + toJson(item);
      }
      return out + "}";
    }
    default:
      return "null";
  }
}

const quotedNames = new Map<string, string>();

/** A member name as JSON, remembered for the API's own names (bounded: metadata brings the client's). */
function quoted(name: string): string {
  let q = quotedNames.get(name);
  if (q === undefined) {
    q = JSON.stringify(name);
    if (quotedNames.size < 1_000) quotedNames.set(name, q);
  }
  return q;
}
