import { create, fromBinary, toBinary, type MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { errorCodeOf, ruleViolation } from "@ledger/common";
import {
  CreateTransactionResponseSchema,
  CreateTransactionsResponseSchema,
  type CreateTransactionResponse,
  type CreateTransactionsResultSchema,
} from "@ledger/proto/ledger/v1/ledger_pb.js";
import { batchResponse } from "./batch-response.js";
import type { ItemAnswer } from "./batcher.js";
import { groupToProto, type GroupRow, type GroupStatus } from "./groups.js";

// A batch call's results are written by hand (batch-response.ts) for speed; the answer must be byte
// for byte what protobuf-es writes for the same results, and decode to them, whatever the items hold.

/** The answer as protobuf-es builds it, the reference. */
function reflective(answers: ItemAnswer[]) {
  let failed = 0;
  const results = answers.map((answer): MessageInitShape<typeof CreateTransactionsResultSchema> => {
    if (answer instanceof ConnectError) {
      failed++;
      const { code, details } = errorCodeOf(answer);
      return { result: { case: "error", value: { code, message: answer.rawMessage, ...(details ? { details } : {}) } } };
    }
    return {
      result: { case: "transactionGroup", value: (answer.response as CreateTransactionResponse).transactionGroup! },
      replayed: answer.replayed,
    };
  });
  return create(CreateTransactionsResponseSchema, { succeeded: answers.length - failed, failed, results });
}

const STATUSES: GroupStatus[] = ["pending", "posted", "canceled", "failed", "reversed"];
const amount = fc.bigInt({ min: 1n, max: 2n ** 63n - 1n });
const text = fc.oneof(fc.constant(""), fc.string({ maxLength: 300 }), fc.string({ unit: "grapheme", maxLength: 200 }));
const when = fc.integer({ min: -62_135_596_800_000, max: 4_102_444_800_000 }).map((ms) => new Date(ms));

const group: fc.Arbitrary<GroupRow> = fc
  .record({
    id: fc.string({ maxLength: 40 }),
    account_id: fc.string({ maxLength: 40 }),
    program_id: fc.string({ maxLength: 40 }),
    status: fc.constantFrom(...STATUSES),
    description: text,
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
    created_at: when,
    updated_at: when,
    legs: fc.array(
      fc.record({
        id: fc.string({ maxLength: 40 }),
        entity_id: fc.string({ maxLength: 40 }),
        direction: fc.constantFrom("debit" as const, "credit" as const),
        amount,
        created_at: when,
      }),
      {
        maxLength: 20,
      },
    ),
  })
  .map((g) => ({ ...g, legs: g.legs.map((leg, position) => ({ ...leg, group_id: g.id, position })) }));

const answer: fc.Arbitrary<ItemAnswer> = fc.oneof(
  {
    arbitrary: fc
      .tuple(group, fc.boolean())
      .map(([g, replayed]) => ({ response: create(CreateTransactionResponseSchema, { transactionGroup: groupToProto(g) }), replayed })),
    weight: 4,
  },
  { arbitrary: text.map((m) => ruleViolation("insufficient_funds", m, { entity_id: "ent_x", available: "0", required: "1" })), weight: 1 },
  { arbitrary: text.map((m) => new ConnectError(m, Code.InvalidArgument)), weight: 1 },
);

describe("batchResponse", () => {
  it("writes the bytes protobuf-es writes for the same results, and reads back as them", () => {
    fc.assert(
      fc.property(fc.array(answer, { minLength: 1, maxLength: 30 }), (answers) => {
        const expected = reflective(answers);
        const bytes = toBinary(CreateTransactionsResponseSchema, batchResponse(answers));
        expect(Buffer.from(bytes).toString("hex")).toBe(Buffer.from(toBinary(CreateTransactionsResponseSchema, expected)).toString("hex"));
        expect(fromBinary(CreateTransactionsResponseSchema, bytes)).toEqual(expected);
      }),
      { numRuns: 300 },
    );
  });

  it("answers a large batch whose results need long lengths", () => {
    const g = fc.sample(group, { numRuns: 1_000, seed: 7 }).map((row) => ({ ...row, metadata: null, description: "x".repeat(200) }));
    const answers = g.map((row) => ({
      response: create(CreateTransactionResponseSchema, { transactionGroup: groupToProto(row) }),
      replayed: false,
    }));
    expect(
      Buffer.from(toBinary(CreateTransactionsResponseSchema, batchResponse(answers))).equals(
        Buffer.from(toBinary(CreateTransactionsResponseSchema, reflective(answers))),
      ),
    ).toBe(true);
  });
});
