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
import { batchMessage, batchResponse } from "./batch-response.js";
import type { ItemAnswer } from "./batch-units.js";
import { anyText, groupRows } from "./group-arbitrary.js";
import { groupToProto } from "./groups.js";

// A batch call's results are written by hand (batch-response.ts) for speed; the answer must be byte
// for byte what protobuf-es writes for the same results, and decode to them, whatever the items hold.
// JSON callers get the message itself (batchMessage), which must be those same results.

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

const group = groupRows({ minAmount: 1n, maxLegs: 20 });
const text = anyText;

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
  it("writes the bytes protobuf-es writes for the same results, and reads back as them and as the JSON callers' message", () => {
    fc.assert(
      fc.property(fc.array(answer, { minLength: 1, maxLength: 30 }), (answers) => {
        const expected = reflective(answers);
        const bytes = toBinary(CreateTransactionsResponseSchema, batchResponse(answers));
        expect(Buffer.from(bytes).toString("hex")).toBe(Buffer.from(toBinary(CreateTransactionsResponseSchema, expected)).toString("hex"));
        expect(fromBinary(CreateTransactionsResponseSchema, bytes)).toEqual(expected);
        expect(batchMessage(answers)).toEqual(expected);
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
