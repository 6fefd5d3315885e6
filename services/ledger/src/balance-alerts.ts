// Balance alerts (docs/api.md#balance-alerts): a condition on one balance of an entity, such as
// "available lt 1000", kept in `balance_alerts`. This file owns the rows, their checks and their
// API form; which money writes turn an alert, and the events they emit, are
// balance-alert-watch.ts.
import type { MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { invalidArgument, isId, MAX_BALANCE, newId, notFound, ruleViolation, type Sql, type Tx } from "@ledger/common";
import { BalanceAlertField, BalanceAlertOperator, type BalanceAlertSchema } from "@ledger/proto/ledger/v1/ledger_pb.js";
import { availableOf, lockEntity, type EntityRow } from "./entities.js";

/** The balance an alert watches. */
export type AlertField = "available" | "posted";
/** How an alert compares the balance (on the left) with its value. */
export type AlertOperator = "lt" | "lte" | "gt" | "gte";

/** What an alert watches: `<field> <operator> <value>`. */
export interface AlertCondition {
  field: AlertField;
  operator: AlertOperator;
  value: bigint;
}

/** A `balance_alerts` row. `triggered` is the condition on the entity's balances as they are. */
export interface BalanceAlertRow extends AlertCondition {
  id: string;
  account_id: string;
  program_id: string;
  entity_id: string;
  triggered: boolean;
  created_at: Date;
}

/** Most alerts one entity may have; one more answers `too_many_alerts`. */
export const MAX_ALERTS_PER_ENTITY = 10;

const FIELDS = new Map<BalanceAlertField, AlertField>([
  [BalanceAlertField.AVAILABLE, "available"],
  [BalanceAlertField.POSTED, "posted"],
]);
const OPERATORS = new Map<BalanceAlertOperator, AlertOperator>([
  [BalanceAlertOperator.LT, "lt"],
  [BalanceAlertOperator.LTE, "lte"],
  [BalanceAlertOperator.GT, "gt"],
  [BalanceAlertOperator.GTE, "gte"],
]);
const FIELD_TO_PROTO = new Map([...FIELDS].map(([proto, word]) => [word, proto]));
const OPERATOR_TO_PROTO = new Map([...OPERATORS].map(([proto, word]) => [word, proto]));

/** Checks the condition of an RPC request: a known field and operator, a value within ±(2^53-1). */
export function parseAlertCondition(field: BalanceAlertField, operator: BalanceAlertOperator, value: bigint): AlertCondition {
  const fieldWord = FIELDS.get(field);
  if (!fieldWord) throw invalidArgument("field must be available or posted", { field: "field" });
  const operatorWord = OPERATORS.get(operator);
  if (!operatorWord) throw invalidArgument("operator must be lt, lte, gt or gte", { field: "operator" });
  if (value > MAX_BALANCE || value < -MAX_BALANCE) {
    throw invalidArgument(`value must be an integer from -${MAX_BALANCE} to ${MAX_BALANCE}`, { field: "value" });
  }
  return { field: fieldWord, operator: operatorWord, value };
}

/** The two balances an alert can watch. */
export interface WatchedBalances {
  posted: bigint;
  available: bigint;
}

/** Whether `condition` holds on `balances`. */
export function conditionHolds(condition: AlertCondition, balances: WatchedBalances): boolean {
  const balance = condition.field === "available" ? balances.available : balances.posted;
  switch (condition.operator) {
    case "lt":
      return balance < condition.value;
    case "lte":
      return balance <= condition.value;
    case "gt":
      return balance > condition.value;
    case "gte":
      return balance >= condition.value;
  }
}

/**
 * Writes a new version of a locked entity's row with nothing changed in it. Every alert change
 * does, so a money write resting on the row version the process cached, with that version's
 * alerts, fails its version check and is applied again on the row and alerts read under lock
 * (docs/architecture.md#cached-balances).
 */
async function bumpEntityVersion(tx: Tx, accountId: string, entityId: string): Promise<void> {
  await tx`update entities set status = status where account_id = ${accountId} and id = ${entityId}`;
}

/**
 * Creates an alert on an entity of the program, under the entity's row lock: the lock money
 * commands take, so no write of its balances commits between the read of `triggered` and this
 * transaction's commit, and alerts counted under it cannot pass the limit together.
 */
export async function createBalanceAlert(
  tx: Tx,
  args: { accountId: string; programId: string; entityId: string; condition: AlertCondition },
): Promise<BalanceAlertRow> {
  const entity = await lockEntity(tx, args.accountId, args.programId, args.entityId);
  refuseUnwatchable(entity);
  const [existing] = await tx<{ n: number }[]>`
    select count(*)::int as n from balance_alerts where account_id = ${entity.account_id} and entity_id = ${entity.id}`;
  if (existing!.n >= MAX_ALERTS_PER_ENTITY) {
    throw ruleViolation(
      "too_many_alerts",
      `entity ${entity.id} already has ${MAX_ALERTS_PER_ENTITY} balance alerts, the most it may have`,
      {
        entity_id: entity.id,
        limit: MAX_ALERTS_PER_ENTITY,
      },
    );
  }
  const { field, operator, value } = args.condition;
  const triggered = conditionHolds(args.condition, { posted: entity.posted, available: availableOf(entity) });
  const [row] = await tx<BalanceAlertRow[]>`
    insert into balance_alerts (id, account_id, program_id, entity_id, field, operator, value, triggered)
    values (${newId("balanceAlert")}, ${entity.account_id}, ${entity.program_id}, ${entity.id}, ${field}, ${operator}, ${value}, ${triggered})
    returning *`;
  await bumpEntityVersion(tx, entity.account_id, entity.id);
  return row!;
}

/**
 * The external entity takes no alert: it is never locked, and concurrent deposits and withdrawals
 * only add deltas to it, so a crossing could not be told without serialising them all
 * (docs/architecture.md#money-rules-and-invariants). A closed entity's balances stay zero for good,
 * so an alert on it could never cross.
 */
function refuseUnwatchable(entity: EntityRow): void {
  if (entity.is_external) {
    throw ruleViolation("invalid_state", `entity ${entity.id} is a program's external entity; it takes no balance alert`, {
      is_external: true,
    });
  }
  if (entity.status === "closed") {
    throw ruleViolation("entity_closed", `entity ${entity.id} is closed; its balances can no longer move`, { entity_id: entity.id });
  }
}

/** Every alert of an entity, oldest first. */
export function listBalanceAlerts(sql: Sql | Tx, accountId: string, entityId: string): Promise<BalanceAlertRow[]> {
  return sql<BalanceAlertRow[]>`select * from balance_alerts where account_id = ${accountId} and entity_id = ${entityId} order by id`;
}

/**
 * Deletes an alert of the program. The entity's row is locked (and bumped) before the alert is
 * deleted, in the order money writes take them, so a write that began on the alert either
 * committed its crossing before, or goes stale and runs again without it: no event after delete.
 */
export async function deleteBalanceAlert(tx: Tx, accountId: string, programId: string, alertId: string): Promise<void> {
  if (!isId("balanceAlert", alertId)) throw notFound("balance alert", alertId);
  const [found] = await tx<{ entity_id: string }[]>`
    select entity_id from balance_alerts where id = ${alertId} and account_id = ${accountId} and program_id = ${programId}`;
  if (!found) throw notFound("balance alert", alertId);
  await bumpEntityVersion(tx, accountId, found.entity_id);
  // Deleted meanwhile by another call, which held the lock first: gone either way.
  const deleted = await tx`delete from balance_alerts where account_id = ${accountId} and id = ${alertId} returning id`;
  if (deleted.length === 0) throw notFound("balance alert", alertId);
}

/** The API form of an alert. */
export function alertToProto(row: BalanceAlertRow): MessageInitShape<typeof BalanceAlertSchema> {
  return {
    alertId: row.id,
    entityId: row.entity_id,
    field: FIELD_TO_PROTO.get(row.field) ?? BalanceAlertField.UNSPECIFIED,
    operator: OPERATOR_TO_PROTO.get(row.operator) ?? BalanceAlertOperator.UNSPECIFIED,
    value: row.value,
    triggered: row.triggered,
    createdAt: timestampFromDate(row.created_at),
  };
}
