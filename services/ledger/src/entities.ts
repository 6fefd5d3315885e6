import type { JsonObject, MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { invalidArgument, isId, newId, notFound, parseMetadata, ruleViolation, storedMetadata, type Sql, type Tx } from "@ledger/common";
import { EntityStatus, type EntitySchema } from "@ledger/proto/ledger/v1/ledger_pb.js";
import { ListQuery, type RowFilters } from "./list-query.js";

/** An entity row with its balances. */
export interface EntityRow {
  id: string;
  account_id: string;
  program_id: string;
  name: string;
  type: string;
  /** `active`, `frozen` or `closed` (docs/api.md#entities-over-time). */
  status: string;
  /** The reason given when it was frozen; empty otherwise. */
  status_reason: string;
  currency_code: string;
  metadata: JsonObject | null;
  is_external: boolean;
  /** How far below zero `available` may go: a debit needs available - amount >= -overdraft_limit. */
  overdraft_limit: bigint;
  posted: bigint;
  pending_debits: bigint;
  pending_credits: bigint;
  held: bigint;
  created_at: Date;
  updated_at: Date;
}

/** What can be spent: posted minus what pending debits and holds have set aside. */
export function availableOf(row: Pick<EntityRow, "posted" | "pending_debits" | "held">): bigint {
  return row.posted - row.pending_debits - row.held;
}

/** Inserts a new active entity. */
export async function insertEntity(
  tx: Tx,
  args: {
    accountId: string;
    programId: string;
    name: string;
    type: string;
    currencyCode: string;
    metadata: JsonObject | null;
    overdraftLimit: bigint;
  },
): Promise<EntityRow> {
  const [row] = await tx<EntityRow[]>`
    insert into entities (id, account_id, program_id, name, type, currency_code, metadata, overdraft_limit)
    values (${newId("entity")}, ${args.accountId}, ${args.programId}, ${args.name}, ${args.type}, ${args.currencyCode},
            ${args.metadata === null ? null : tx.json(args.metadata)}, ${args.overdraftLimit})
    returning *`;
  return row!;
}

/** Reads one entity of a program; any other program's or account's entity is not found. */
export async function findEntity(sql: Sql | Tx, accountId: string, programId: string, entityId: string): Promise<EntityRow> {
  if (!isId("entity", entityId)) throw notFound("entity", entityId);
  const [row] = await sql<EntityRow[]>`
    select * from entities where account_id = ${accountId} and id = ${entityId} and program_id = ${programId}`;
  if (!row) throw notFound("entity", entityId);
  return row;
}

/** What an update changes; a field left out stays as it is. */
export interface EntityChanges {
  name?: string;
  type?: string;
  /** Keys to merge into the stored metadata; a key whose value is null is removed. */
  metadata?: JsonObject;
  overdraftLimit?: bigint;
}

/**
 * Reads one entity of a program and locks its row as money commands do (money-load.ts), so a change
 * and a money command on the same entity take turns. It is the only row the caller locks, so it
 * cannot wait in a cycle with a money command (docs/architecture.md#money-rules-and-invariants).
 */
export async function lockEntity(tx: Tx, accountId: string, programId: string, entityId: string): Promise<EntityRow> {
  if (!isId("entity", entityId)) throw notFound("entity", entityId);
  const [row] = await tx<EntityRow[]>`
    select * from entities where account_id = ${accountId} and id = ${entityId} and program_id = ${programId} for update`;
  if (!row) throw notFound("entity", entityId);
  return row;
}

/** `stored` with `patch` merged in key by key, a null value removing its key; null when nothing is left. */
export function mergeMetadata(stored: JsonObject | null, patch: JsonObject): JsonObject | null {
  const merged: JsonObject = {};
  for (const [key, value] of Object.entries(stored ?? {})) merged[key] = value;
  for (const [key, value] of Object.entries(patch)) {
    if (value === null) delete merged[key];
    else merged[key] = value;
  }
  return Object.keys(merged).length > 0 ? merged : null;
}

/**
 * Applies `changes` to a locked entity and answers the row after the change. The external entity
 * takes a name and metadata only: its type marks it, and it may go negative anyway. The merged
 * metadata must still be within the limits of metadata.
 */
export async function updateEntity(tx: Tx, row: EntityRow, changes: EntityChanges): Promise<EntityRow> {
  if (row.is_external && (changes.type !== undefined || changes.overdraftLimit !== undefined)) {
    throw ruleViolation("invalid_state", `entity ${row.id} is a program's external entity; only its name and metadata can change`, {
      is_external: true,
    });
  }
  const metadata = changes.metadata === undefined ? row.metadata : mergeMetadata(row.metadata, changes.metadata);
  if (metadata) parseMetadata(metadata);
  const [updated] = await tx<EntityRow[]>`
    update entities set
      name = ${changes.name ?? row.name},
      type = ${changes.type ?? row.type},
      metadata = ${metadata === null ? null : tx.json(metadata)},
      overdraft_limit = ${changes.overdraftLimit ?? row.overdraft_limit},
      updated_at = now()
    where account_id = ${row.account_id} and id = ${row.id}
    returning *`;
  return updated!;
}

/** Reads a page of a program's entities, newest first, optionally of one type and status and within `filters` (name among them). */
export async function listEntities(
  sql: Sql,
  accountId: string,
  programId: string,
  page: { limit: number; before?: string | undefined; type?: string | undefined; status?: EntityStatusName | undefined },
  filters: RowFilters,
): Promise<EntityRow[]> {
  const query = new ListQuery({
    select: "select * from entities",
    account: { column: "account_id", id: accountId },
    key: "id",
    createdAt: "created_at",
    metadata: "metadata",
    name: "name",
    timeIndexed: true,
  });
  query.where(`program_id = ${query.param(programId)}`);
  if (page.type) query.where(`type = ${query.param(page.type)}`);
  if (page.status) query.where(`status = ${query.param(page.status)}`);
  return query.page<EntityRow>(sql, filters, { limit: page.limit + 1, before: page.before });
}

/** An entity's status as stored (docs/api.md#entities-over-time). */
export type EntityStatusName = "active" | "frozen" | "closed";

const STATUS_TO_PROTO: Record<EntityStatusName, EntityStatus> = {
  active: EntityStatus.ACTIVE,
  frozen: EntityStatus.FROZEN,
  closed: EntityStatus.CLOSED,
};

/** The stored spelling of a proto entity status; undefined for UNSPECIFIED, 400 for a value not in the enum. */
export function entityStatusFromProto(status: EntityStatus): EntityStatusName | undefined {
  if (status === EntityStatus.UNSPECIFIED) return undefined;
  const found = (Object.keys(STATUS_TO_PROTO) as EntityStatusName[]).find((name) => STATUS_TO_PROTO[name] === status);
  if (!found) throw invalidArgument(`status ${status} is not an entity status`, { field: "status" });
  return found;
}

/** A lifecycle step of an entity: what it does to the status. */
export type StatusChange = { to: "frozen"; reason: string } | { to: "active" } | { to: "closed" };

/**
 * Moves a locked entity to another status. Freeze takes an active entity, unfreeze a frozen one,
 * close either, and only with every balance at zero (read under the lock, so no money command can
 * change them until this transaction ends). Closed is final, and the external entity stays active.
 */
export async function changeStatus(tx: Tx, row: EntityRow, change: StatusChange): Promise<EntityRow> {
  const step = change.to === "frozen" ? "frozen" : change.to === "active" ? "unfrozen" : "closed";
  if (row.is_external) {
    throw ruleViolation("invalid_state", `entity ${row.id} is a program's external entity; it cannot be ${step}`, { is_external: true });
  }
  const allowed = change.to === "frozen" ? ["active"] : change.to === "active" ? ["frozen"] : ["active", "frozen"];
  if (!allowed.includes(row.status)) {
    throw ruleViolation("invalid_state", `entity ${row.id} is ${row.status}; it cannot be ${step}`, { status: row.status });
  }
  if (change.to === "closed" && (row.posted !== 0n || row.pending_debits !== 0n || row.pending_credits !== 0n || row.held !== 0n)) {
    throw ruleViolation("entity_not_empty", `entity ${row.id} has money or money in flight; every balance must be zero to close it`, {
      entity_id: row.id,
      posted: Number(row.posted),
      pending_debits: Number(row.pending_debits),
      pending_credits: Number(row.pending_credits),
      held: Number(row.held),
    });
  }
  const [updated] = await tx<EntityRow[]>`
    update entities set status = ${change.to}, status_reason = ${change.to === "frozen" ? change.reason : ""}, updated_at = now()
    where account_id = ${row.account_id} and id = ${row.id}
    returning *`;
  return updated!;
}

/** The API form of an entity, balances included. */
export function entityToProto(row: EntityRow): MessageInitShape<typeof EntitySchema> {
  return {
    entityId: row.id,
    programId: row.program_id,
    entityName: row.name,
    entityType: row.type,
    status: STATUS_TO_PROTO[row.status as EntityStatusName] ?? EntityStatus.UNSPECIFIED,
    statusReason: row.status_reason,
    currencyCode: row.currency_code,
    ...(row.metadata ? { metadata: storedMetadata(row.metadata) } : {}),
    isExternal: row.is_external,
    overdraftLimit: row.overdraft_limit,
    createdAt: timestampFromDate(row.created_at),
    balances: {
      posted: row.posted,
      pendingDebits: row.pending_debits,
      pendingCredits: row.pending_credits,
      held: row.held,
      available: availableOf(row),
    },
  };
}
