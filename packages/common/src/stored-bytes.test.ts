import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { CreateHoldRequestSchema } from "@ledger/proto/hold/v1/hold_pb.js";
import {
  CreateTransactionRequestSchema,
  CreateTransactionResponseSchema,
  CreateTransactionsRequestSchema,
  Direction,
  TransactionStatus,
} from "@ledger/proto/ledger/v1/ledger_pb.js";
import { describe, expect, it } from "vitest";
import { requestFingerprint } from "./idempotency.js";

// Idempotency keys outlive a release: a key claimed before an upgrade holds the fingerprint of its
// request and the bytes of its first answer, and a retry after the upgrade must match the one and
// be answered the other. These bytes were written by the services' earlier hand-written protobuf
// encoder for the same messages (docs/decisions/removed-protobuf-codecs.md); protobuf-es must hash
// and read them alike.

const entries = create(CreateTransactionRequestSchema, {
  programId: "prg_01",
  description: "Rent – März 🏠",
  status: TransactionStatus.POSTED,
  metadata: { invoice: "INV-7", lines: [1, 2.5, "x"], nested: { ok: true, none: null } },
  form: {
    case: "entries",
    value: {
      entries: [
        { entityId: "ent_a", direction: Direction.DEBIT, amount: 9_223_372_036_854_775_807n },
        { entityId: "ent_b", direction: Direction.CREDIT, amount: 9_223_372_036_854_775_807n },
      ],
    },
  },
});
const transfer = create(CreateTransactionRequestSchema, {
  description: "",
  form: { case: "transfer", value: { fromEntityId: "ent_a", toEntityId: "ent_b", amount: 1n } },
});

describe("stored fingerprints", () => {
  it("match a retry of the same request", () => {
    const batch = create(CreateTransactionsRequestSchema, {
      atomic: true,
      transactions: [{ transaction: entries, idempotencyKey: "item-1" }, { transaction: transfer }],
    });
    const hold = create(CreateHoldRequestSchema, {
      entityId: "ent_a",
      amount: 250n,
      expiresAt: { seconds: 1_800_000_000n, nanos: 5 },
      description: "deposit",
    });
    const fingerprints = {
      entries: requestFingerprint("ledger.v1.LedgerService/CreateTransaction", CreateTransactionRequestSchema, entries),
      transfer: requestFingerprint("ledger.v1.LedgerService/CreateTransaction", CreateTransactionRequestSchema, transfer),
      batch: requestFingerprint("ledger.v1.LedgerService/CreateTransactions", CreateTransactionsRequestSchema, batch),
      hold: requestFingerprint("hold.v1.HoldService/CreateHold", CreateHoldRequestSchema, hold),
    };
    expect(Object.fromEntries(Object.entries(fingerprints).map(([name, hash]) => [name, hash.toString("hex")]))).toEqual({
      entries: "da266b7af74ace1a39af00cd3c28f128b34c5b4bd8797ce34d2a8e40eb6fd43a",
      transfer: "ec8c7119ae74b41a2f4d3217398b1c4eddaff968550dc70317f9d070ec3ceb03",
      batch: "7b04ffdefc06153ebaedcc91a0e5597e0bf7799b2a04f0ace21f5e4afe799264",
      hold: "c8d1ba4cd53f7e3596548ccb104521b9587378ab508200e42f8b66e77b8e020b",
    });
  });

  it("match a retry of a request with a field this version does not know, which the hash keeps", () => {
    // The transfer above followed by field 99 (varint 7), as a newer client may send it.
    const bytes = Buffer.from("2a100a05656e745f611205656e745f621801980607", "hex");
    const request = fromBinary(CreateTransactionRequestSchema, bytes);
    const hash = requestFingerprint("ledger.v1.LedgerService/CreateTransaction", CreateTransactionRequestSchema, request);
    expect(hash.toString("hex")).toBe("77659b9ab310e7e2f6f349032084c77b373287f554441b555e2eeb212a644a7c");
  });
});

describe("stored answers", () => {
  it("replay as the first success and are written the same again", () => {
    const at = { seconds: 1_772_600_767n, nanos: 89_000_000 };
    const leg = { transactionGroupId: "trx-grp_1", amount: 70n, status: TransactionStatus.POSTED, createdAt: at };
    const answer = create(CreateTransactionResponseSchema, {
      transactionGroup: {
        transactionGroupId: "trx-grp_1",
        programId: "prg_01",
        status: TransactionStatus.POSTED,
        description: "Rent – März 🏠",
        metadata: { invoice: "INV-7" },
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
      },
    });
    const stored = Buffer.from(
      "0ace010a097472782d6772705f3112067072675f30311802221352656e7420e28093204dc3a4727a20f09f8fa02a140a120a07696e766f69636512071a05494e562d37320355534440464a2c0a057472785f3112097472782d6772705f311a05656e745f612001284630023a0b08bffb9ecd0610c090b82a4a2c0a057472785f3212097472782d6772705f311a05656e745f622002284630023a0b08bffb9ecd0610c090b82a520b08bffb9ecd0610c090b82a5a0608c0fb9ecd066a097472782d6772705f3272096475706c6963617465",
      "hex",
    );
    expect(fromBinary(CreateTransactionResponseSchema, stored)).toEqual(answer);
    expect(Buffer.from(toBinary(CreateTransactionResponseSchema, answer)).toString("hex")).toBe(stored.toString("hex"));
  });
});
