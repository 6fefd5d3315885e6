import type { JsonObject, JsonValue } from "@bufbuild/protobuf";
import { timestampDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import { amountToJson, enumWordOr } from "@ledger/common";
import type { BalanceAlertEventData, Event, HoldEventData, TransactionEventData } from "@ledger/proto/events/v1/events_pb.js";
import { HoldReleaseReasonSchema, HoldStatusSchema } from "@ledger/proto/hold/v1/hold_pb.js";
import {
  BalanceAlertFieldSchema,
  BalanceAlertOperatorSchema,
  DirectionSchema,
  EntityStatusSchema,
  TransactionStatusSchema,
  type Balances,
  type Entity,
} from "@ledger/proto/ledger/v1/ledger_pb.js";

// The delivered body (docs/webhooks.md#a-delivery), built once per event when it arrives and stored as text:
// every attempt sends, and signs, exactly these bytes. Names are snake_case and amounts JSON
// integers (amounts are at most 2^53-1, docs/api.md#amounts-and-text, so a number holds them exactly).
// Statuses, directions and release reasons come from the enum fields, or from the string fields
// when the enum is unspecified: an event written by the previous version has only the strings
// (docs/operations.md#upgrade-notes). Either way the body has the same lowercase word.

function iso(ts: Timestamp | undefined): string | null {
  return ts ? timestampDate(ts).toISOString() : null;
}

function transactionData(d: TransactionEventData): JsonObject {
  return {
    transaction_group_id: d.transactionGroupId,
    program_id: d.programId,
    amount: amountToJson(d.amount),
    currency_code: d.currencyCode,
    status: enumWordOr(TransactionStatusSchema, d.transactionStatus, d.status),
    description: d.description,
    metadata: (d.metadata ?? {}) as JsonValue,
    legs: d.legs.map((leg) => ({
      transaction_id: leg.transactionId,
      entity_id: leg.entityId,
      direction: enumWordOr(DirectionSchema, leg.legDirection, leg.direction),
      amount: amountToJson(leg.amount),
    })),
    disputed: d.disputed,
    reversal_transaction_group_id: d.reversalTransactionGroupId || null,
    reverses_transaction_group_id: d.reversesTransactionGroupId || null,
    reason: d.reason || null,
  };
}

function holdData(d: HoldEventData): JsonObject {
  return {
    hold_id: d.holdId,
    entity_id: d.entityId,
    program_id: d.programId,
    amount: amountToJson(d.amount),
    captured_amount: amountToJson(d.capturedAmount),
    currency_code: d.currencyCode,
    status: enumWordOr(HoldStatusSchema, d.holdStatus, d.status),
    description: d.description,
    expires_at: iso(d.expiresAt),
    release_reason: enumWordOr(HoldReleaseReasonSchema, d.holdReleaseReason, d.releaseReason) || null,
    created_at: iso(d.createdAt),
    ...(d.captured
      ? {
          captured: {
            amount: amountToJson(d.captured.amount),
            destination_entity_id: d.captured.destinationEntityId,
            transaction_group_id: d.captured.transactionGroupId,
          },
        }
      : {}),
  };
}

/** The entity after the change, as `GET /entity` shows it, with its program. */
function entityData(d: Entity): JsonObject {
  return {
    entity_id: d.entityId,
    entity_name: d.entityName,
    entity_type: d.entityType,
    status: enumWordOr(EntityStatusSchema, d.status, ""),
    status_reason: d.statusReason,
    currency_code: d.currencyCode,
    metadata: (d.metadata ?? {}) as JsonValue,
    program_id: d.programId,
    is_external: d.isExternal,
    overdraft_limit: amountToJson(d.overdraftLimit),
    created_at: iso(d.createdAt),
    balances: balancesData(d.balances),
  };
}

function balancesData(b: Balances | undefined): JsonObject {
  return {
    posted: amountToJson(b?.posted ?? 0n),
    pending_debits: amountToJson(b?.pendingDebits ?? 0n),
    pending_credits: amountToJson(b?.pendingCredits ?? 0n),
    held: amountToJson(b?.held ?? 0n),
    available: amountToJson(b?.available ?? 0n),
  };
}

/** A balance alert's crossing: the alert after it, and the entity's balances then. */
function balanceAlertData(d: BalanceAlertEventData): JsonObject {
  const alert = d.alert;
  return {
    alert: {
      alert_id: alert?.alertId ?? "",
      entity_id: alert?.entityId ?? "",
      field: enumWordOr(BalanceAlertFieldSchema, alert?.field ?? 0, ""),
      operator: enumWordOr(BalanceAlertOperatorSchema, alert?.operator ?? 0, ""),
      value: amountToJson(alert?.value ?? 0n),
      triggered: alert?.triggered ?? false,
      created_at: iso(alert?.createdAt),
    },
    entity_id: d.entityId,
    program_id: d.programId,
    balances: balancesData(d.balances),
  };
}

/** The `data` object of an event. */
export function eventData(event: Event): JsonObject {
  switch (event.data.case) {
    case "transaction":
      return transactionData(event.data.value);
    case "hold":
      return holdData(event.data.value);
    case "entity":
      return entityData(event.data.value);
    case "balanceAlert":
      return balanceAlertData(event.data.value);
    default:
      return {};
  }
}

/** The delivered body, `{"id","type","created","data"}`, with `created` in Unix seconds. */
export function deliveryBody(event: Event): string {
  const created = event.created ? Math.floor(timestampDate(event.created).getTime() / 1000) : 0;
  return JSON.stringify({ id: event.id, type: event.type, created, data: eventData(event) });
}

/**
 * The id of the object an event is about, for GET /events?object_id= (docs/webhooks.md#endpoints):
 * the transaction group, the hold, the entity or the balance alert; null for an event without data.
 * Migration 0010 derives the same from the stored body of events received before it.
 */
export function eventObjectId(event: Event): string | null {
  switch (event.data.case) {
    case "transaction":
      return event.data.value.transactionGroupId || null;
    case "hold":
      return event.data.value.holdId || null;
    case "entity":
      return event.data.value.entityId || null;
    case "balanceAlert":
      return event.data.value.alert?.alertId || null;
    default:
      return null;
  }
}
