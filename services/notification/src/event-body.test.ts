import { create, fromBinary, type MessageInitShape, toBinary } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { EventSchema } from "@ledger/proto/events/v1/events_pb.js";
import { HoldReleaseReason, HoldStatus } from "@ledger/proto/hold/v1/hold_pb.js";
import { Direction, TransactionStatus } from "@ledger/proto/ledger/v1/ledger_pb.js";
import { describe, expect, it } from "vitest";
import { deliveryBody } from "./event-body.js";

// The delivered body, rendered from the envelope of proto/events/v1 directly.

describe("delivered body", () => {
  it("renders hold.captured data in snake_case with integer amounts and ISO times", () => {
    const event = create(EventSchema, {
      id: "evt_01m80vsp6s0mgnc62d66t86pr2",
      type: "hold.captured",
      accountId: "acct_x",
      created: timestampFromDate(new Date("2026-01-02T03:04:05.678Z")),
      data: {
        case: "hold",
        value: {
          holdId: "hold_1",
          entityId: "ent_1",
          amount: 9_007_199_254_740_991n,
          capturedAmount: 40n,
          status: "partially_captured",
          description: "deposit",
          programId: "prg_1",
          currencyCode: "EUR",
          createdAt: timestampFromDate(new Date("2026-01-01T00:00:00Z")),
          captured: { amount: 40n, destinationEntityId: "ent_2", transactionGroupId: "trx-grp_1" },
        },
      },
    });
    const body = deliveryBody(event);
    expect(body.startsWith('{"id":"evt_01m80vsp6s0mgnc62d66t86pr2","type":"hold.captured","created":1767323045,"data":{')).toBe(true);
    expect(JSON.parse(body).data).toEqual({
      hold_id: "hold_1",
      entity_id: "ent_1",
      program_id: "prg_1",
      amount: 9_007_199_254_740_991,
      captured_amount: 40,
      currency_code: "EUR",
      status: "partially_captured",
      description: "deposit",
      expires_at: null,
      release_reason: null,
      created_at: "2026-01-01T00:00:00.000Z",
      captured: { amount: 40, destination_entity_id: "ent_2", transaction_group_id: "trx-grp_1" },
    });
    expect(body).toContain('"amount":9007199254740991');
  });

  // Events are durable: one written by the previous version has the statuses, directions and
  // release reasons only as strings, and receivers must get the same body from it as from one
  // written now, with both forms (docs/operations.md#upgrade-notes).
  describe("from an event of the previous version, with only the string fields", () => {
    const created = timestampFromDate(new Date("2026-01-02T03:04:05Z"));
    const common = { id: "evt_1", accountId: "acct_x", programId: "prg_1", created };
    /** The bytes as a writer of the previous version sent them, read back by this version. */
    const asRead = (init: MessageInitShape<typeof EventSchema>) =>
      fromBinary(EventSchema, toBinary(EventSchema, create(EventSchema, init)));

    it("renders a transaction event with the same words", () => {
      const value = {
        transactionGroupId: "trx-grp_1",
        programId: "prg_1",
        amount: 70n,
        currencyCode: "USD",
        reversalTransactionGroupId: "trx-grp_2",
      };
      const old = asRead({
        ...common,
        type: "transaction.reversed",
        data: {
          case: "transaction",
          value: {
            ...value,
            status: "reversed",
            legs: [
              { transactionId: "trx_1", entityId: "ent_1", direction: "debit", amount: 70n },
              { transactionId: "trx_2", entityId: "ent_2", direction: "credit", amount: 70n },
            ],
          },
        },
      });
      const current = asRead({
        ...common,
        type: "transaction.reversed",
        data: {
          case: "transaction",
          value: {
            ...value,
            status: "reversed",
            transactionStatus: TransactionStatus.REVERSED,
            legs: [
              { transactionId: "trx_1", entityId: "ent_1", direction: "debit", legDirection: Direction.DEBIT, amount: 70n },
              { transactionId: "trx_2", entityId: "ent_2", direction: "credit", legDirection: Direction.CREDIT, amount: 70n },
            ],
          },
        },
      });
      expect(deliveryBody(old)).toBe(deliveryBody(current));
      expect(JSON.parse(deliveryBody(old)).data).toMatchObject({
        status: "reversed",
        legs: [
          { transaction_id: "trx_1", direction: "debit" },
          { transaction_id: "trx_2", direction: "credit" },
        ],
      });
    });

    it("renders a released hold event with the same words", () => {
      const value = { holdId: "hold_1", entityId: "ent_1", amount: 100n, capturedAmount: 30n, programId: "prg_1", currencyCode: "USD" };
      const old = asRead({
        ...common,
        type: "hold.released",
        data: { case: "hold", value: { ...value, status: "released", releaseReason: "expired" } },
      });
      const current = asRead({
        ...common,
        type: "hold.released",
        data: {
          case: "hold",
          value: {
            ...value,
            status: "released",
            holdStatus: HoldStatus.RELEASED,
            releaseReason: "expired",
            holdReleaseReason: HoldReleaseReason.EXPIRED,
          },
        },
      });
      expect(deliveryBody(old)).toBe(deliveryBody(current));
      expect(JSON.parse(deliveryBody(old)).data).toMatchObject({ status: "released", release_reason: "expired" });
    });

    it("prefers the enum when both are set", () => {
      const event = asRead({
        ...common,
        type: "hold.created",
        data: { case: "hold", value: { holdId: "hold_1", status: "stale word", holdStatus: HoldStatus.PARTIALLY_CAPTURED } },
      });
      expect(JSON.parse(deliveryBody(event)).data).toMatchObject({ status: "partially_captured", release_reason: null });
    });
  });
});
