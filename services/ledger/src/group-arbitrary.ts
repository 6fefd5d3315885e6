import fc from "fast-check";
import type { GroupRow, GroupStatus } from "./groups.js";

// Test support, not service code: random stored groups for the property tests of the hand-written
// protobuf encoders (events.test.ts, batch-response.test.ts), which must write what protobuf-es
// writes whatever a group holds.

const STATUSES: GroupStatus[] = ["pending", "posted", "canceled", "failed", "reversed"];

/** Descriptions and reasons: empty, any UTF-16, and whole graphemes (multi-byte UTF-8). */
export const anyText = fc.oneof(fc.constant(""), fc.string({ maxLength: 300 }), fc.string({ unit: "grapheme", maxLength: 200 }));

const anyDate = fc.integer({ min: -62_135_596_800_000, max: 4_102_444_800_000 }).map((ms) => new Date(ms));

// "__proto__" as a key does not survive protobuf-es's Struct reading (it sets the object's
// prototype instead of a property), so a group carrying it cannot round-trip through any encoder.
const metadataKey = fc.string({ maxLength: 10 }).filter((key) => key !== "__proto__");

/** A stored group with its legs; amounts from `minAmount` to 2^63-1, mostly without metadata (which is written by `encodeBinary`, not by hand). */
export function groupRows(options: { minAmount: bigint; maxLegs: number }): fc.Arbitrary<GroupRow> {
  const amount = fc.bigInt({ min: options.minAmount, max: 2n ** 63n - 1n });
  return fc
    .record({
      id: fc.string({ maxLength: 40 }),
      account_id: fc.string({ maxLength: 40 }),
      program_id: fc.string({ maxLength: 40 }),
      status: fc.constantFrom(...STATUSES),
      description: anyText,
      metadata: fc.oneof(
        { arbitrary: fc.constant(null), weight: 4 },
        { arbitrary: fc.dictionary(metadataKey, fc.oneof(fc.string(), fc.integer(), fc.boolean())), weight: 1 },
      ),
      currency_code: fc.string({ maxLength: 3 }),
      amount,
      disputed: fc.boolean(),
      reason: anyText,
      reverses_group_id: fc.option(fc.string({ maxLength: 40 }), { nil: null }),
      reversed_by_group_id: fc.option(fc.string({ maxLength: 40 }), { nil: null }),
      created_at: anyDate,
      updated_at: anyDate,
      legs: fc.array(
        fc.record({
          id: fc.string({ maxLength: 40 }),
          entity_id: fc.string({ maxLength: 40 }),
          direction: fc.constantFrom("debit" as const, "credit" as const),
          amount,
          created_at: anyDate,
        }),
        { maxLength: options.maxLegs },
      ),
    })
    .map((g) => Object.assign({}, g, { legs: g.legs.map((leg, position) => Object.assign({}, leg, { group_id: g.id, position })) }));
}
