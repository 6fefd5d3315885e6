import type { DescEnum } from "@bufbuild/protobuf";

// One spelling of proto enums as words, shared by the gateway's REST JSON and the webhook bodies
// (docs/api.md, docs/webhooks.md): the value's name without the enum's prefix, in lowercase, so
// `HOLD_STATUS_PARTIALLY_CAPTURED` is `partially_captured`.

const wordsOf = new WeakMap<DescEnum, Map<number, string>>();

/** The word of each value of a proto enum, the unspecified (0) one included. */
export function enumWords(schema: DescEnum): Map<number, string> {
  let found = wordsOf.get(schema);
  if (!found) {
    const prefix = schema.sharedPrefix ?? "";
    found = new Map(schema.values.map((value) => [value.number, value.name.toLowerCase().slice(prefix.length)]));
    wordsOf.set(schema, found);
  }
  return found;
}

/**
 * The word of an enum value, or `fallback` when the value is unspecified or unknown here: the
 * string field a previous version wrote beside it, for a message it wrote before the enum existed.
 */
export function enumWordOr(schema: DescEnum, value: number, fallback: string): string {
  return (value === 0 ? undefined : enumWords(schema).get(value)) ?? fallback;
}
