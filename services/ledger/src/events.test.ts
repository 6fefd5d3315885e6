import { toBinary } from "@bufbuild/protobuf";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { EventSchema } from "@ledger/proto/events/v1/events_pb.js";
import { encodeTransactionEvent, transactionEvent, type TransactionEventType } from "./events.js";
import type { GroupRow, GroupStatus } from "./groups.js";

// The outbox payload of a transaction event is written by hand (events.ts) for speed; it must be
// byte for byte what protobuf-es writes for the same Event message, whatever the group holds.

const TYPES: TransactionEventType[] = [
  "transaction.created",
  "transaction.posted",
  "transaction.reversed",
  "transaction.failed",
  "transaction.canceled",
  "transaction.disputed",
];
const STATUSES: GroupStatus[] = ["pending", "posted", "canceled", "failed", "reversed"];
const amount = fc.bigInt({ min: 0n, max: 2n ** 63n - 1n });
const text = fc.oneof(fc.constant(""), fc.string({ maxLength: 300 }), fc.string({ unit: "grapheme", maxLength: 200 }));

const group = fc.record({
  id: fc.string({ maxLength: 40 }),
  account_id: fc.string({ maxLength: 40 }),
  program_id: fc.string({ maxLength: 40 }),
  status: fc.constantFrom(...STATUSES),
  description: text,
  // Mostly without metadata: a group with metadata takes the reflective path.
  metadata: fc.oneof(
    { arbitrary: fc.constant(null), weight: 4 },
    { arbitrary: fc.dictionary(fc.string({ maxLength: 10 }), fc.oneof(fc.string(), fc.integer(), fc.boolean())), weight: 1 },
  ),
  currency_code: fc.string({ maxLength: 3 }),
  amount,
  disputed: fc.boolean(),
  reason: text,
  reverses_group_id: fc.option(fc.string({ maxLength: 40 }), { nil: null }),
  reversed_by_group_id: fc.option(fc.string({ maxLength: 40 }), { nil: null }),
  legs: fc.array(
    fc.record({
      id: fc.string({ maxLength: 40 }),
      entity_id: fc.string({ maxLength: 40 }),
      direction: fc.constantFrom("debit" as const, "credit" as const),
      amount,
    }),
    { maxLength: 100 },
  ),
});

describe("encodeTransactionEvent", () => {
  it("writes the bytes protobuf-es writes for the same event", () => {
    fc.assert(
      fc.property(
        group,
        fc.constantFrom(...TYPES),
        fc.record({ requestId: text, traceparent: text }),
        fc.integer({ min: 0, max: 4_102_444_800_000 }),
        (g, type, origin, ms) => {
          const at = new Date(ms);
          const row: GroupRow = {
            ...g,
            created_at: at,
            updated_at: at,
            legs: g.legs.map((leg, position) => ({ ...leg, group_id: g.id, position, created_at: at })),
          };
          const encoded = encodeTransactionEvent(type, row, origin, at);
          const expected = toBinary(EventSchema, { ...transactionEvent(type, row, origin, at), id: encoded.id });
          expect(encoded.type).toBe(type);
          expect(Buffer.from(encoded.payload).toString("hex")).toBe(Buffer.from(expected).toString("hex"));
        },
      ),
      { numRuns: 300 },
    );
  });
});
