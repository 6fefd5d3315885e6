import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { ruleViolation } from "@ledger/common";
import {
  CreateTransactionResponseSchema,
  CreateTransactionsResponseSchema,
  Direction,
  TransactionStatus,
} from "@ledger/proto/ledger/v1/ledger_pb.js";
import { batchAnswer } from "./transaction-rpc.js";

const at = { seconds: 1_772_600_767n, nanos: 89_000_000 };
const leg = { transactionGroupId: "trx-grp_1", amount: 70n, status: TransactionStatus.POSTED, createdAt: at };
const group = {
  transactionGroupId: "trx-grp_1",
  programId: "prg_01",
  status: TransactionStatus.POSTED,
  currencyCode: "USD",
  amount: 70n,
  legs: [
    Object.assign({ transactionId: "trx_1", entityId: "ent_a", direction: Direction.DEBIT }, leg),
    Object.assign({ transactionId: "trx_2", entityId: "ent_b", direction: Direction.CREDIT }, leg),
  ],
  createdAt: at,
  updatedAt: { seconds: 1_772_600_768n, nanos: 0 },
  reversedByTransactionGroupId: "trx-grp_2",
  reason: "duplicate",
};
const answers = [
  { response: create(CreateTransactionResponseSchema, { transactionGroup: group }), replayed: false },
  ruleViolation("insufficient_funds", "ent_a has 0, needs 1", { entity_id: "ent_a", available: "0", required: "1" }),
  {
    response: create(CreateTransactionResponseSchema, {
      transactionGroup: Object.assign({}, group, { description: "Rent – März 🏠", metadata: { invoice: "INV-7" } }),
    }),
    replayed: true,
  },
  new ConnectError("amount must be positive", Code.InvalidArgument),
];

describe("batchAnswer", () => {
  it("counts the items and answers each in order", () => {
    const answer = create(CreateTransactionsResponseSchema, batchAnswer(answers));
    expect(answer).toMatchObject({ succeeded: 2, failed: 2 });
    expect(answer.results.map((r) => [r.result.case, r.replayed])).toEqual([
      ["transactionGroup", false],
      ["error", false],
      ["transactionGroup", true],
      ["error", false],
    ]);
    expect(answer.results[1]!.result.value).toMatchObject({
      code: "insufficient_funds",
      message: "ent_a has 0, needs 1",
      details: { entity_id: "ent_a", available: "0", required: "1" },
    });
  });

  // A batch call with an idempotency key stores its whole answer, and a retry after an upgrade is
  // answered those bytes: they are the ones the previous release's hand-written results gave for the
  // same items (docs/decisions/removed-protobuf-codecs.md), and read back as this release's answer.
  it("writes the bytes the previous release stored and sent for the same items", () => {
    const stored =
      "080210021aa6010aa3010a097472782d6772705f3112067072675f30311802320355534440464a2c0a057472785f3112097472782d6772705f311a05656e745f612001284630023a0b08bffb9ecd0610c090b82a4a2c0a057472785f3212097472782d6772705f311a05656e745f622002284630023a0b08bffb9ecd0610c090b82a520b08bffb9ecd0610c090b82a5a0608c0fb9ecd066a097472782d6772705f3272096475706c69636174651a6712650a12696e73756666696369656e745f66756e64731214656e745f612068617320302c206e6565647320311a390a140a09656e746974795f696412071a05656e745f610a100a09617661696c61626c6512031a01300a0f0a08726571756972656412031a01311ad3010ace010a097472782d6772705f3112067072675f30311802221352656e7420e28093204dc3a4727a20f09f8fa02a140a120a07696e766f69636512071a05494e562d37320355534440464a2c0a057472785f3112097472782d6772705f311a05656e745f612001284630023a0b08bffb9ecd0610c090b82a4a2c0a057472785f3212097472782d6772705f311a05656e745f622002284630023a0b08bffb9ecd0610c090b82a520b08bffb9ecd0610c090b82a5a0608c0fb9ecd066a097472782d6772705f3272096475706c696361746518011a2c122a0a0f696e76616c69645f726571756573741217616d6f756e74206d75737420626520706f736974697665";
    const answer = create(CreateTransactionsResponseSchema, batchAnswer(answers));
    expect(Buffer.from(toBinary(CreateTransactionsResponseSchema, answer)).toString("hex")).toBe(stored);
    expect(fromBinary(CreateTransactionsResponseSchema, Buffer.from(stored, "hex"))).toEqual(answer);
  });
});
