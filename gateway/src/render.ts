import type { DescEnum } from "@bufbuild/protobuf";
import { timestampDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import { enumWordOr, isoMicros } from "@ledger/common";
import type { PageInfo } from "@ledger/proto/common/v1/common_pb.js";
import {
  BalanceAlertFieldSchema,
  BalanceAlertOperatorSchema,
  Direction,
  DirectionSchema,
  EntityStatusSchema,
  TransactionStatusSchema,
  type TransactionStatus,
  type BalanceAlert,
  type Entity,
  type GetEntityStatementResponse,
  type Leg,
  type Program,
  type StatementEntry,
  type TransactionGroup,
} from "@ledger/proto/ledger/v1/ledger_pb.js";
import { enumOfWord } from "./input.js";
import { JsonText } from "./json.js";

// Proto messages to the JSON shapes of gateway/openapi.yaml. Field names are snake_case, enums
// are lowercase words, timestamps are ISO 8601 UTC, and amounts stay bigint until written.

/**
 * The REST spelling of a proto enum value, the one place the gateway turns enums into words:
 * `HOLD_STATUS_PARTIALLY_CAPTURED` is `partially_captured`. The unset value (or one this gateway
 * does not know) reads `unknown`.
 */
export function enumWord(schema: DescEnum, value: number): string {
  return enumWordOr(schema, value, "unknown");
}

/**
 * The proto enum value a query parameter names: unset for an absent or empty one, and 400
 * `invalid_request` for a word that is not one of the enum's.
 */
export function enumParam<E extends number>(schema: DescEnum, word: string, parameter: string): E {
  if (word === "") return 0 as E;
  return enumOfWord(schema, word, parameter, { parameter });
}

/** The REST spelling of a transaction status. */
export function statusName(status: TransactionStatus): string {
  return enumWord(TransactionStatusSchema, status);
}

function iso(ts: Timestamp | undefined): string | null {
  return ts ? timestampDate(ts).toISOString() : null;
}

/** An entity with its balances. */
export function renderEntity(entity: Entity) {
  const b = entity.balances;
  return {
    entity_id: entity.entityId,
    entity_name: entity.entityName,
    entity_type: entity.entityType,
    status: enumWord(EntityStatusSchema, entity.status),
    status_reason: entity.statusReason,
    currency_code: entity.currencyCode,
    metadata: entity.metadata ?? {},
    program_id: entity.programId,
    is_external: entity.isExternal,
    overdraft_limit: entity.overdraftLimit,
    created_at: iso(entity.createdAt),
    balances: {
      posted: b?.posted ?? 0n,
      pending_debits: b?.pendingDebits ?? 0n,
      pending_credits: b?.pendingCredits ?? 0n,
      held: b?.held ?? 0n,
      available: b?.available ?? 0n,
    },
  };
}

/** A balance alert (docs/api.md#balance-alerts). */
export function renderBalanceAlert(alert: BalanceAlert) {
  return {
    alert_id: alert.alertId,
    entity_id: alert.entityId,
    field: enumWord(BalanceAlertFieldSchema, alert.field),
    operator: enumWord(BalanceAlertOperatorSchema, alert.operator),
    value: alert.value,
    triggered: alert.triggered,
    created_at: iso(alert.createdAt),
  };
}

/** A leg as returned on creation: with its entity and group. */
export function renderLeg(leg: Leg) {
  return {
    transaction_id: leg.transactionId,
    transaction_group_id: leg.transactionGroupId,
    entity_id: leg.entityId,
    direction: enumWord(DirectionSchema, leg.direction),
    amount: leg.amount,
    status: statusName(leg.status),
    created_at: iso(leg.createdAt),
  };
}

/** A leg as GET /transaction returns it: without entity_id, which the caller named (gateway/openapi.yaml). */
export function renderRetrievedLeg(leg: Leg) {
  const { entity_id: _omitted, ...rest } = renderLeg(leg);
  return rest;
}

/** A transaction group with all its legs. */
export function renderGroup(group: TransactionGroup) {
  return {
    transaction_group_id: group.transactionGroupId,
    status: statusName(group.status),
    description: group.description,
    metadata: group.metadata ?? {},
    currency_code: group.currencyCode,
    amount: group.amount,
    disputed: group.disputed,
    program_id: group.programId,
    legs: group.legs.map(renderLeg),
    reverses_transaction_group_id: group.reversesTransactionGroupId || null,
    reversed_by_transaction_group_id: group.reversedByTransactionGroupId || null,
    reason: group.reason || null,
    created_at: iso(group.createdAt),
    updated_at: iso(group.updatedAt),
  };
}

/**
 * A page of an entity's statement; its moments to the microsecond, as the ledger stamps them. A
 * page holds up to 1,000 entries: they are written straight into JSON text, each in the order and
 * spelling `toJson` would give the object it replaces (docs/decisions/statement-page-written-as-text.md).
 */
export function renderStatement(res: GetEntityStatementResponse) {
  const s = res.statement;
  const micros = (ts: Timestamp | undefined) => (ts ? isoMicros(ts) : null);
  return {
    statement: {
      entity_id: s?.entityId ?? "",
      currency_code: s?.currencyCode ?? "",
      from: micros(s?.from),
      to: micros(s?.to),
      opening_posted: s?.openingPosted ?? 0n,
      closing_posted: s?.closingPosted ?? 0n,
    },
    entries: new JsonText(statementEntriesJson(res.entries)),
    pagination: renderPage(res.page),
  };
}

/** The JSON array of a statement's entries, each `{transaction_id, transaction_group_id, direction, amount, description, posted_at, posted_after}`. */
function statementEntriesJson(entries: StatementEntry[]): string {
  const debit = JSON.stringify(enumWord(DirectionSchema, Direction.DEBIT));
  const credit = JSON.stringify(enumWord(DirectionSchema, Direction.CREDIT));
  const moment = new IsoMicrosWriter();
  let out = "[";
  for (let i = 0; i < entries.length; i++) {
    const e = entries[i]!;
    const direction =
      e.direction === Direction.DEBIT
        ? debit
        : e.direction === Direction.CREDIT
          ? credit
          : JSON.stringify(enumWord(DirectionSchema, e.direction));
    out += `${i > 0 ? "," : ""}{"transaction_id":${JSON.stringify(e.transactionId)},"transaction_group_id":${JSON.stringify(
      e.transactionGroupId,
    )},"direction":${direction},"amount":${e.amount},"description":${JSON.stringify(e.description)},"posted_at":${
      e.postedAt ? `"${moment.iso(e.postedAt)}"` : "null"
    },"posted_after":${e.postedAfter}}`;
  }
  return `${out}]`;
}

/**
 * `isoMicros` for a run of moments, most of them in the same second as the one before (a statement's
 * legs, oldest first): the date and time of day are formatted once per second, not once per moment.
 */
class IsoMicrosWriter {
  private seconds: bigint | undefined;
  private prefix = "";

  iso(ts: Timestamp): string {
    if (ts.seconds !== this.seconds) {
      const whole = isoMicros(ts);
      this.seconds = ts.seconds;
      this.prefix = whole.slice(0, -7);
      return whole;
    }
    return `${this.prefix}${String(Math.floor(ts.nanos / 1000)).padStart(6, "0")}Z`;
  }
}

/** A program. */
export function renderProgram(program: Program) {
  return {
    program_id: program.programId,
    program_name: program.programName,
    currency_code: program.currencyCode,
    external_entity_id: program.externalEntityId,
    is_default: program.isDefault,
    created_at: iso(program.createdAt),
  };
}

/** The pagination object of every list (docs/api.md#pagination). */
export function renderPage(page: PageInfo | undefined) {
  return {
    limit: page?.limit ?? 0,
    has_next: page?.hasNext ?? false,
    next_cursor: page?.hasNext ? page.nextCursor : null,
  };
}
