import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { newId } from "@ledger/common";
import { EventSchema, type Event } from "@ledger/proto/events/v1/events_pb.js";
import type { GroupRow } from "./groups.js";

/** The transaction event types of SPEC.md section 6.1. */
export type TransactionEventType =
  | "transaction.created"
  | "transaction.posted"
  | "transaction.reversed"
  | "transaction.failed"
  | "transaction.canceled"
  | "transaction.disputed";

/** Builds a `transaction.*` event about `group` as it is after the change (DESIGN.md section 4). */
export function transactionEvent(type: TransactionEventType, group: GroupRow, origin: { requestId: string; traceparent: string }, at: Date): Event {
  return create(EventSchema, {
    id: newId("event"),
    type,
    accountId: group.account_id,
    programId: group.program_id,
    created: timestampFromDate(at),
    requestId: origin.requestId,
    traceparent: origin.traceparent,
    data: {
      case: "transaction",
      value: {
        transactionGroupId: group.id,
        programId: group.program_id,
        amount: group.amount,
        currencyCode: group.currency_code,
        status: group.status,
        description: group.description,
        ...(group.metadata ? { metadata: group.metadata } : {}),
        legs: group.legs.map((leg) => ({
          transactionId: leg.id,
          entityId: leg.entity_id,
          direction: leg.direction,
          amount: leg.amount,
        })),
        disputed: group.disputed,
        reversalTransactionGroupId: group.reversed_by_group_id ?? "",
        reversesTransactionGroupId: group.reverses_group_id ?? "",
        reason: group.reason,
      },
    },
  });
}
