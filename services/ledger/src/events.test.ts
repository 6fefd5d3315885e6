import { fromBinary, toBinary } from "@bufbuild/protobuf";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { EventSchema } from "@ledger/proto/events/v1/events_pb.js";
import { Direction, TransactionStatus } from "@ledger/proto/ledger/v1/ledger_pb.js";
import { encodeTransactionEvent, transactionEvent, type TransactionEventType } from "./events.js";
import { anyText, groupRows } from "./group-arbitrary.js";
import type { GroupRow } from "./groups.js";

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
const group = groupRows({ minAmount: 0n, maxLegs: 100 });
const text = anyText;

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
          const row: GroupRow = { ...g, created_at: at, updated_at: at, legs: g.legs.map((leg) => ({ ...leg, created_at: at })) };
          const encoded = encodeTransactionEvent(type, row, origin, at);
          const expected = toBinary(EventSchema, { ...transactionEvent(type, row, origin, at), id: encoded.id });
          expect(encoded.type).toBe(type);
          expect(Buffer.from(encoded.payload).toString("hex")).toBe(Buffer.from(expected).toString("hex"));
        },
      ),
      { numRuns: 300 },
    );
  });

  // For one release events carry the status and the leg directions twice: as enums, and as the
  // words the previous version reads (docs/operations.md#upgrade-notes).
  it("writes the status and the leg directions both as enums and as words", () => {
    const at = new Date("2026-03-04T05:06:07.089Z");
    const legs = [
      { id: "trx_1", group_id: "trx-grp_1", position: 0, entity_id: "ent_1", direction: "debit" as const, amount: 70n, created_at: at },
      { id: "trx_2", group_id: "trx-grp_1", position: 1, entity_id: "ent_2", direction: "credit" as const, amount: 70n, created_at: at },
    ];
    const row: GroupRow = {
      id: "trx-grp_1",
      account_id: "acct_1",
      program_id: "prg_1",
      status: "reversed",
      description: "",
      metadata: null,
      currency_code: "USD",
      amount: 70n,
      disputed: false,
      reason: "",
      reverses_group_id: null,
      reversed_by_group_id: "trx-grp_2",
      created_at: at,
      updated_at: at,
      legs,
    };
    const encoded = encodeTransactionEvent("transaction.reversed", row, { requestId: "req_1", traceparent: "" }, at);
    const event = fromBinary(EventSchema, encoded.payload);
    if (event.data.case !== "transaction") throw new Error("expected transaction data");
    expect(event.data.value).toMatchObject({ status: "reversed", transactionStatus: TransactionStatus.REVERSED });
    expect(event.data.value.legs.map((leg) => [leg.direction, leg.legDirection])).toEqual([
      ["debit", Direction.DEBIT],
      ["credit", Direction.CREDIT],
    ]);
    expect(Buffer.from(encoded.payload)).toEqual(
      Buffer.from(
        toBinary(EventSchema, {
          ...transactionEvent("transaction.reversed", row, { requestId: "req_1", traceparent: "" }, at),
          id: encoded.id,
        }),
      ),
    );
  });
});
