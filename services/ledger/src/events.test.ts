import { fromBinary } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { EventSchema } from "@ledger/proto/events/v1/events_pb.js";
import { Direction, TransactionStatus } from "@ledger/proto/ledger/v1/ledger_pb.js";
import { encodeTransactionEvent } from "./events.js";
import type { GroupRow } from "./groups.js";

const at = new Date("2026-03-04T05:06:07.089Z");
const row: GroupRow = {
  id: "trx-grp_1",
  account_id: "acct_1",
  program_id: "prg_1",
  status: "reversed",
  description: "Rent – März 🏠",
  metadata: null,
  currency_code: "USD",
  amount: 70n,
  disputed: true,
  reason: "duplicate",
  reverses_group_id: null,
  reversed_by_group_id: "trx-grp_2",
  created_at: at,
  updated_at: at,
  legs: [
    { id: "trx_1", group_id: "trx-grp_1", position: 0, entity_id: "ent_1", direction: "debit", amount: 70n, created_at: at },
    { id: "trx_2", group_id: "trx-grp_1", position: 1, entity_id: "ent_2", direction: "credit", amount: 70n, created_at: at },
  ],
};
const origin = { requestId: "req_1", traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" };

describe("encodeTransactionEvent", () => {
  // For one release events carry the status and the leg directions twice: as enums, and as the
  // words the previous version reads (docs/operations.md#upgrade-notes).
  it("writes the status and the leg directions both as enums and as words", () => {
    const event = fromBinary(EventSchema, encodeTransactionEvent("transaction.reversed", row, origin, at).payload);
    if (event.data.case !== "transaction") throw new Error("expected transaction data");
    expect(event.data.value).toMatchObject({ status: "reversed", transactionStatus: TransactionStatus.REVERSED });
    expect(event.data.value.legs.map((leg) => [leg.direction, leg.legDirection])).toEqual([
      ["debit", Direction.DEBIT],
      ["credit", Direction.CREDIT],
    ]);
  });

  // Outbox rows and JetStream messages written by the previous release are read by this one, and
  // receivers compare payloads across it: the bytes after the event's id (random, field 1) are the
  // ones the earlier hand-written encoder wrote for the same group (docs/decisions/removed-protobuf-codecs.md).
  it.each([
    [
      "without metadata",
      row,
      "12147472616e73616374696f6e2e72657665727365641a06616363745f3122057072675f312a0b08bffb9ecd0610c090b82a32057265715f313a3730302d30616637363531393136636434336464383434386562323131633830333139632d623761643662373136393230333333312d30315289010a097472782d6772705f3112057072675f31184622035553442a087265766572736564321352656e7420e28093204dc3a4727a20f09f8fa042190a057472785f311205656e745f311a05646562697420462801421a0a057472785f321205656e745f321a0663726564697420462802480152097472782d6772705f3262096475706c69636174656805",
    ],
    [
      "with metadata",
      Object.assign({}, row, { metadata: { invoice: "INV-7", n: 3 } }),
      "12147472616e73616374696f6e2e72657665727365641a06616363745f3122057072675f312a0b08bffb9ecd0610c090b82a32057265715f313a3730302d30616637363531393136636434336464383434386562323131633830333139632d623761643662373136393230333333312d303152af010a097472782d6772705f3112057072675f31184622035553442a087265766572736564321352656e7420e28093204dc3a4727a20f09f8fa03a240a120a07696e766f69636512071a05494e562d370a0e0a016e120911000000000000084042190a057472785f311205656e745f311a05646562697420462801421a0a057472785f321205656e745f321a0663726564697420462802480152097472782d6772705f3262096475706c69636174656805",
    ],
  ])("writes the bytes of the previous release, %s", (_, group, afterId) => {
    const { id, payload } = encodeTransactionEvent("transaction.reversed", group, origin, at);
    const idField = Buffer.concat([Buffer.from([0x0a, Buffer.byteLength(id)]), Buffer.from(id)]);
    expect(Buffer.from(payload).toString("hex")).toBe(idField.toString("hex") + afterId);
  });
});
