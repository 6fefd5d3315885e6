import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { encodeBinary, newId, storedMetadata } from "@ledger/common";
import { EventSchema, type Event } from "@ledger/proto/events/v1/events_pb.js";
import { entityToProto, type EntityRow } from "./entities.js";
import { directionToProto, statusToProto, type GroupRow } from "./groups.js";
import { Writer } from "./wire.js";

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
  payload: Uint8Array;
}

const eventWriter = new Writer();

/**
 * The outbox payload of `transactionEvent(type, group, origin, at)`, written straight from the
 * group without building the message: protobuf-es's reflective encoder was the largest part of a
 * batch's CPU. The bytes are the ones `toBinary(EventSchema, ...)` writes (events.test.ts checks it
 * on random groups), fields in number order, empty ones left out. A group with metadata (a
 * `Struct`) builds the message and goes through `encodeBinary`, which is rare and not worth a
 * second Struct writer here.
 */
export function encodeTransactionEvent(
  type: TransactionEventType,
  group: GroupRow,
  origin: { requestId: string; traceparent: string },
  at: Date,
): EncodedEvent {
  if (group.metadata) {
    const event = transactionEvent(type, group, origin, at);
    return { id: event.id, type, payload: encodeBinary(EventSchema, event) };
  }
  const id = newId("event");
  const w = eventWriter;
  w.reset();
  w.string(1, id);
  w.string(2, type);
  w.string(3, group.account_id);
  w.string(4, group.program_id);
  const ms = at.getTime();
  const created = w.open(5);
  const seconds = Math.floor(ms / 1000);
  if (seconds !== 0) w.int64(1, BigInt(seconds));
  const nanos = (ms - seconds * 1000) * 1_000_000;
  if (nanos !== 0) w.int64(2, BigInt(nanos));
  w.close(created);
  w.string(6, origin.requestId);
  w.string(7, origin.traceparent);
  const data = w.open(10);
  w.string(1, group.id);
  w.string(2, group.program_id);
  w.int64(3, group.amount);
  w.string(4, group.currency_code);
  w.string(5, group.status);
  w.string(6, group.description);
  for (const leg of group.legs) {
    const at = w.open(8);
    w.string(1, leg.id);
    w.string(2, leg.entity_id);
    w.string(3, leg.direction);
    w.int64(4, leg.amount);
    w.int32(5, directionToProto(leg.direction));
    w.close(at);
  }
  if (group.disputed) w.bool(9, true);
  w.string(10, group.reversed_by_group_id ?? "");
  w.string(11, group.reverses_group_id ?? "");
  w.string(12, group.reason);
  w.int32(13, statusToProto(group.status));
  w.close(data);
  return { id, type, payload: w.take() };
}
