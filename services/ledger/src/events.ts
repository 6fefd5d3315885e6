import { create, toBinary } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { newId, storedMetadata } from "@ledger/common";
import { EventSchema, type Event } from "@ledger/proto/events/v1/events_pb.js";
import { entityToProto, type EntityRow } from "./entities.js";
import { directionToProto, statusToProto, type GroupRow } from "./groups.js";

/** The transaction event types (docs/webhooks.md#how-events-become-deliveries). */
export type TransactionEventType =
  | "transaction.created"
  | "transaction.posted"
  | "transaction.reversed"
  | "transaction.failed"
  | "transaction.canceled"
  | "transaction.disputed";

/**
 * Builds a `transaction.*` event about `group` as it is after the change, which is what receivers see.
 * The status and the leg directions go in twice, as enums and as the words the previous version
 * reads (docs/operations.md#upgrade-notes).
 */
export function transactionEvent(
  type: TransactionEventType,
  group: GroupRow,
  origin: { requestId: string; traceparent: string },
  at: Date,
): Event {
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
        ...(group.metadata ? { metadata: storedMetadata(group.metadata) } : {}),
        legs: group.legs.map((leg) => ({
          transactionId: leg.id,
          entityId: leg.entity_id,
          direction: leg.direction,
          amount: leg.amount,
          legDirection: directionToProto(leg.direction),
        })),
        disputed: group.disputed,
        reversalTransactionGroupId: group.reversed_by_group_id ?? "",
        reversesTransactionGroupId: group.reverses_group_id ?? "",
        reason: group.reason,
        transactionStatus: statusToProto(group.status),
      },
    },
  });
}

/** The entity event types (docs/webhooks.md#how-events-become-deliveries). */
export type EntityEventType = "entity.updated";

/** Builds an `entity.*` event whose data is `row`, the entity after the change. */
export function entityEvent(type: EntityEventType, row: EntityRow, origin: { requestId: string; traceparent: string }): Event {
  return create(EventSchema, {
    id: newId("event"),
    type,
    accountId: row.account_id,
    programId: row.program_id,
    created: timestampFromDate(row.updated_at),
    requestId: origin.requestId,
    traceparent: origin.traceparent,
    data: { case: "entity", value: entityToProto(row) },
  });
}

/** An event ready for the outbox: its id and type, and its `Event` message already encoded. */
export interface EncodedEvent {
  id: string;
  type: TransactionEventType;
  /** The account whose outbox row carries it (an outbox row holds one account's events). */
  accountId: string;
  payload: Uint8Array;
}

/** The outbox payload of `transactionEvent(type, group, origin, at)`: the event, encoded. */
export function encodeTransactionEvent(
  type: TransactionEventType,
  group: GroupRow,
  origin: { requestId: string; traceparent: string },
  at: Date,
): EncodedEvent {
  const event = transactionEvent(type, group, origin, at);
  return { id: event.id, type, accountId: group.account_id, payload: toBinary(EventSchema, event) };
}
