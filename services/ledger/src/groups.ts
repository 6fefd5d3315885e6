import type { JsonObject, MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { isId, notFound, storedMetadata, type Sql, type Tx } from "@ledger/common";
import { Direction, TransactionStatus, type LegSchema, type TransactionGroupSchema } from "@ledger/proto/ledger/v1/ledger_pb.js";
import { AccountRefs } from "./account-refs.js";
import { ListQuery, type RowFilters } from "./list-query.js";

/** Statuses of a transaction group, as stored and as the REST API spells them. */
export type GroupStatus = "pending" | "posted" | "canceled" | "failed" | "reversed";
export type LegDirection = "debit" | "credit";

/** A leg as stored. Its status is its group's. */
export interface LegRow {
  id: string;
  group_id: string;
  position: number;
  entity_id: string;
  direction: LegDirection;
  amount: bigint;
  created_at: Date;
}

/** A transaction group as stored, with its legs in request order. */
export interface GroupRow {
  id: string;
  account_id: string;
  program_id: string;
  status: GroupStatus;
  description: string;
  metadata: JsonObject | null;
  currency_code: string;
  amount: bigint;
  disputed: boolean;
  reason: string;
  reverses_group_id: string | null;
  reversed_by_group_id: string | null;
  created_at: Date;
  updated_at: Date;
  legs: LegRow[];
}

const STATUS_TO_PROTO: Record<GroupStatus, TransactionStatus> = {
  pending: TransactionStatus.PENDING,
  posted: TransactionStatus.POSTED,
  canceled: TransactionStatus.CANCELED,
  failed: TransactionStatus.FAILED,
  reversed: TransactionStatus.REVERSED,
};

/** The proto enum of a stored status. */
export function statusToProto(status: GroupStatus): TransactionStatus {
  return STATUS_TO_PROTO[status];
}

/** The proto enum of a stored leg direction. */
export function directionToProto(direction: LegRow["direction"]): Direction {
  return direction === "debit" ? Direction.DEBIT : Direction.CREDIT;
}

/** The stored spelling of a proto status; undefined for UNSPECIFIED. */
export function statusFromProto(status: TransactionStatus): GroupStatus | undefined {
  return (Object.keys(STATUS_TO_PROTO) as GroupStatus[]).find((key) => STATUS_TO_PROTO[key] === status);
}

/** The API form of a leg; its status comes from its group. */
export function legToProto(leg: LegRow, status: GroupStatus): MessageInitShape<typeof LegSchema> {
  return {
    transactionId: leg.id,
    transactionGroupId: leg.group_id,
    entityId: leg.entity_id,
    direction: directionToProto(leg.direction),
    amount: leg.amount,
    status: statusToProto(status),
    createdAt: timestampFromDate(leg.created_at),
  };
}

/** The API form of a group with its legs. */
export function groupToProto(group: GroupRow): MessageInitShape<typeof TransactionGroupSchema> {
  return {
    transactionGroupId: group.id,
    programId: group.program_id,
    status: STATUS_TO_PROTO[group.status],
    description: group.description,
    ...(group.metadata ? { metadata: storedMetadata(group.metadata) } : {}),
    currencyCode: group.currency_code,
    disputed: group.disputed,
    amount: group.amount,
    legs: group.legs.map((leg) => legToProto(leg, group.status)),
    createdAt: timestampFromDate(group.created_at),
    updatedAt: timestampFromDate(group.updated_at),
    reversesTransactionGroupId: group.reverses_group_id ?? "",
    reversedByTransactionGroupId: group.reversed_by_group_id ?? "",
    reason: group.reason,
  };
}

/**
 * Reads groups by id with their legs. With `lock`, the groups are locked in id order, the first
 * step of the fixed lock order every write follows (groups, then entities, then external entities).
 */
export async function loadGroups(sql: Sql | Tx, refs: AccountRefs, lock: boolean): Promise<Map<string, GroupRow>> {
  const groups = new Map<string, GroupRow>();
  if (refs.size === 0) return groups;
  const { accounts, ids } = refs.sorted();
  const rows = lock
    ? await sql<Omit<GroupRow, "legs">[]>`
        select * from transaction_groups where (account_id, id) in (select * from unnest(${accounts}::text[], ${ids}::text[]))
        order by id for update`
    : await sql<Omit<GroupRow, "legs">[]>`
        select * from transaction_groups where (account_id, id) in (select * from unnest(${accounts}::text[], ${ids}::text[]))`;
  for (const group of await withLegs(sql, rows)) groups.set(group.id, group);
  return groups;
}

/** Group rows with their legs (in request order), read in one statement; the rows keep their order. */
export async function withLegs(sql: Sql | Tx, rows: Omit<GroupRow, "legs">[]): Promise<GroupRow[]> {
  const groups = new Map<string, GroupRow>();
  for (const row of rows) groups.set(row.id, Object.assign(row, { legs: [] as LegRow[] }));
  if (groups.size === 0) return [];
  const accounts = [...groups.values()].map((g) => g.account_id);
  const legs = await sql<LegRow[]>`
    select * from legs where (account_id, group_id) in (select * from unnest(${accounts}::text[], ${[...groups.keys()]}::text[]))
    order by group_id, position`;
  for (const leg of legs) groups.get(leg.group_id)?.legs.push(leg);
  return [...groups.values()];
}

/** Reads one group of a program; another program's or account's group is not found. */
export async function findGroup(sql: Sql, accountId: string, programId: string, groupId: string): Promise<GroupRow> {
  const refs = new AccountRefs();
  refs.add(accountId, groupId);
  const group = isId("group", groupId) ? (await loadGroups(sql, refs, false)).get(groupId) : undefined;
  if (!group || group.account_id !== accountId || group.program_id !== programId) throw notFound("transaction group", groupId);
  return group;
}

/** A leg with the status of its group. */
export type LegWithStatus = LegRow & { status: GroupStatus };

/** Reads one leg of one entity (the entity's tenancy is checked by the caller). */
export async function findLeg(sql: Sql, entity: { account_id: string; id: string }, legId: string): Promise<LegWithStatus> {
  if (!isId("leg", legId)) throw notFound("transaction", legId);
  const [row] = await sql<LegWithStatus[]>`
    select l.*, g.status from legs l join transaction_groups g on g.account_id = l.account_id and g.id = l.group_id
    where l.account_id = ${entity.account_id} and l.id = ${legId} and l.entity_id = ${entity.id}`;
  if (!row) throw notFound("transaction", legId);
  return row;
}

/** Reads a page of an entity's legs, newest first, optionally of one status and within `filters` (the group's metadata). */
export async function listLegs(
  sql: Sql,
  entity: { account_id: string; id: string },
  page: { limit: number; before?: string | undefined; status?: GroupStatus | undefined },
  filters: RowFilters,
): Promise<LegWithStatus[]> {
  const query = new ListQuery({
    select: "select l.*, g.status from legs l join transaction_groups g on g.account_id = l.account_id and g.id = l.group_id",
    account: { column: "l.account_id", id: entity.account_id },
    key: "l.id",
    createdAt: "l.created_at",
    metadata: "g.metadata",
    // legs has no index on created_at: a time range walks the entity's legs newest first.
    timeIndexed: false,
  });
  query.where(`l.entity_id = ${query.param(entity.id)}`);
  if (page.status) query.where(`g.status = ${query.param(page.status)}`);
  return query.page<LegWithStatus>(sql, filters, { limit: page.limit + 1, before: page.before });
}

/**
 * Reads a page of a program's groups, newest first, optionally of one status and within `filters`;
 * `withLegs` adds the legs of those on the page. The account is checked as well as the program, as
 * findGroup does.
 */
export async function listGroups(
  sql: Sql,
  scope: { accountId: string; programId: string },
  page: { limit: number; before?: string | undefined; status?: GroupStatus | undefined },
  filters: RowFilters,
): Promise<Omit<GroupRow, "legs">[]> {
  const query = new ListQuery({
    select: "select * from transaction_groups",
    account: { column: "account_id", id: scope.accountId },
    key: "id",
    createdAt: "created_at",
    metadata: "metadata",
    timeIndexed: true,
  });
  query.where(`program_id = ${query.param(scope.programId)}`);
  if (page.status) query.where(`status = ${query.param(page.status)}`);
  return query.page<Omit<GroupRow, "legs">>(sql, filters, { limit: page.limit + 1, before: page.before });
}
