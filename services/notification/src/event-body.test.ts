import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { EventSchema } from "@ledger/proto/events/v1/events_pb.js";
import { describe, expect, it } from "vitest";
import { deliveryBody } from "./event-body.js";

// The delivered body of a hold event; hold events come from the hold service, which is not built
// yet, so this checks the rendering from the envelope of proto/events/v1 directly.

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
});
