// The `balance.alert_triggered` and `balance.alert_cleared` events (docs/webhooks.md#balance-alerts),
// built as protobuf-es messages. They are rare (one per crossing, never per transfer), so the
// generic encoder is all they need.
import { create, toBinary } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { newId } from "@ledger/common";
import { EventSchema, type Event } from "@ledger/proto/events/v1/events_pb.js";
import { alertToProto, type BalanceAlertRow } from "./balance-alerts.js";

/** The balance alert event types: the condition turned true, or turned false. */
export type BalanceAlertEventType = "balance.alert_triggered" | "balance.alert_cleared";

/** An entity's balances after the call that crossed, `available` included. */
export interface AlertBalances {
  posted: bigint;
  pendingDebits: bigint;
  pendingCredits: bigint;
  held: bigint;
  available: bigint;
}

/** Where a crossing came from: the call whose commit it is part of. */
export interface AlertOrigin {
  requestId: string;
  traceparent: string;
}

/**
 * The event of one crossing: `alert` as it is after it (its `triggered` says which way it went),
 * with the entity's balances then.
 */
export function balanceAlertEvent(alert: BalanceAlertRow, balances: AlertBalances, origin: AlertOrigin, at: Date): Event {
  return create(EventSchema, {
    id: newId("event"),
    type: alert.triggered ? "balance.alert_triggered" : "balance.alert_cleared",
    accountId: alert.account_id,
    programId: alert.program_id,
    created: timestampFromDate(at),
    requestId: origin.requestId,
    traceparent: origin.traceparent,
    data: {
      case: "balanceAlert",
      value: { alert: alertToProto(alert), entityId: alert.entity_id, programId: alert.program_id, balances },
    },
  });
}

/** An event ready for the outbox: its id, its type and its encoded `Event` message. */
export interface EncodedAlertEvent {
  id: string;
  type: BalanceAlertEventType;
  /** The account whose outbox row carries it (an outbox row holds one account's events). */
  accountId: string;
  payload: Uint8Array;
}

/** `balanceAlertEvent`, encoded for the outbox. */
export function encodeBalanceAlertEvent(alert: BalanceAlertRow, balances: AlertBalances, origin: AlertOrigin, at: Date): EncodedAlertEvent {
  const event = balanceAlertEvent(alert, balances, origin, at);
  return { id: event.id, type: event.type as BalanceAlertEventType, accountId: event.accountId, payload: toBinary(EventSchema, event) };
}
