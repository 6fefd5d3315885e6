/**
 * JSON text for API responses. Money is bigint inside the services and JSON.stringify throws on
 * bigint, so this writer prints bigints as plain integer literals, exactly, on purpose.
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
      if (Array.isArray(value)) return `[${value.map((item) => (item === undefined ? "null" : toJson(item))).join(",")}]`;
      if (value instanceof Date) return JSON.stringify(value.toISOString());
      const parts: string[] = [];
      for (const [key, item] of Object.entries(value)) {
        if (item === undefined) continue;
        parts.push(`${JSON.stringify(key)}:${toJson(item)}`);
      }
      return `{${parts.join(",")}}`;
    }
    default:
      return "null";
  }
}
