import type { JsonObject, MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { isId, newId, notFound, storedMetadata, type Sql, type Tx } from "@ledger/common";
import { EntityStatus, type EntitySchema } from "@ledger/proto/ledger/v1/ledger_pb.js";

/** An entity row with its balances. */
export interface EntityRow {
  id: string;
  account_id: string;
  program_id: string;
  name: string;
  type: string;
  status: string;
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
    select * from entities where id = ${entityId} and account_id = ${accountId} and program_id = ${programId}`;
  if (!row) throw notFound("entity", entityId);
  return row;
}

/** Reads a page of a program's entities, newest first. */
export async function listEntities(
  sql: Sql,
  programId: string,
  page: { limit: number; before?: string | undefined; type?: string | undefined },
): Promise<EntityRow[]> {
  return sql<EntityRow[]>`
    select * from entities
    where program_id = ${programId}
      ${page.type ? sql`and type = ${page.type}` : sql``}
      ${page.before ? sql`and id < ${page.before}` : sql``}
    order by id desc limit ${page.limit + 1}`;
}

/** The API form of an entity, balances included. */
export function entityToProto(row: EntityRow): MessageInitShape<typeof EntitySchema> {
  return {
    entityId: row.id,
    programId: row.program_id,
    entityName: row.name,
    entityType: row.type,
    status: row.status === "active" ? EntityStatus.ACTIVE : EntityStatus.UNSPECIFIED,
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
