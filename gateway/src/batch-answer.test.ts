import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { EmptySchema } from "@bufbuild/protobuf/wkt";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { CreateTransactionsResponseSchema, Direction, TransactionStatus } from "@ledger/proto/ledger/v1/ledger_pb.js";
import { readAnswer } from "./batch-answer.js";

// The gateway reads a batch call's answer with the wire reader (batch-answer.ts) for speed; it must
// read exactly what protobuf-es reads from the same bytes, whatever the results hold.

const text = fc.oneof(fc.constant(""), fc.string({ maxLength: 60 }), fc.string({ unit: "grapheme", maxLength: 40 }));
const int64 = fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n });
const timestamp = fc.option(fc.record({ seconds: int64, nanos: fc.integer({ min: 0, max: 999_999_999 }) }), { nil: undefined });
const status = fc.constantFrom(...(Object.values(TransactionStatus).filter((v) => typeof v === "number") as TransactionStatus[]));
const direction = fc.constantFrom(...(Object.values(Direction).filter((v) => typeof v === "number") as Direction[]));

const group = fc.record({
  transactionGroupId: text,
  programId: text,
  status,
  description: text,
  metadata: fc.oneof(
    { arbitrary: fc.constant(undefined), weight: 4 },
    { arbitrary: fc.dictionary(fc.string({ maxLength: 8 }), fc.oneof(fc.string(), fc.integer(), fc.boolean())), weight: 1 },
  ),
  currencyCode: text,
  disputed: fc.boolean(),
  amount: int64,
  legs: fc.array(
    fc.record({ transactionId: text, transactionGroupId: text, entityId: text, direction, amount: int64, status, createdAt: timestamp }),
    { maxLength: 6 },
  ),
  createdAt: timestamp,
  updatedAt: timestamp,
  reversesTransactionGroupId: text,
  reversedByTransactionGroupId: text,
  reason: text,
});

const result = fc.oneof(
  {
    arbitrary: fc
      .tuple(group, fc.boolean())
      .map(([value, replayed]) => ({ result: { case: "transactionGroup" as const, value }, replayed })),
    weight: 4,
  },
  {
    arbitrary: fc
      .record({
        code: text,
        message: text,
        details: fc.option(fc.dictionary(fc.string({ maxLength: 8 }), fc.string()), { nil: undefined }),
      })
      .map((value) => ({ result: { case: "error" as const, value } })),
    weight: 1,
  },
);

describe("readAnswer", () => {
  it("reads what protobuf-es reads from the same answer", () => {
    fc.assert(
      fc.property(fc.nat({ max: 1_000 }), fc.nat({ max: 1_000 }), fc.array(result, { maxLength: 20 }), (succeeded, failed, results) => {
        const bytes = toBinary(
          CreateTransactionsResponseSchema,
          create(CreateTransactionsResponseSchema, { succeeded, failed, results } as never),
        );
        const expected = fromBinary(CreateTransactionsResponseSchema, bytes);
        const read = readAnswer(fromBinary(EmptySchema, bytes).$unknown ?? []);
        expect(read).toEqual({ succeeded: expected.succeeded, failed: expected.failed, results: expected.results });
      }),
      { numRuns: 300 },
    );
  });
});
