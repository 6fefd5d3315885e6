import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { HandlerContext } from "@connectrpc/connect";
import {
  invalidArgument,
  isId,
  newId,
  notFound,
  parseText,
  principalOf,
  requestIdOf,
  traceOf,
  type Principal,
  type Sql,
  type Tx,
} from "@ledger/common";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { ProgramSchema } from "@ledger/proto/ledger/v1/ledger_pb.js";

/** A program row with the external entity of its default currency. */
export interface ProgramRow {
  id: string;
  account_id: string;
  name: string;
  currency_code: string;
  is_default: boolean;
  created_at: Date;
  external_entity_id: string;
}

/** Currency codes are three capital letters (ISO 4217 form); the list itself is not enforced. */
export function parseCurrencyCode(value: string, field = "currency_code"): string {
  if (!/^[A-Z]{3}$/.test(value)) throw invalidArgument(`${field} must be three capital letters, like USD`, { [field]: value });
  return value;
}

/** Validates a name field: required, trimmed length 1 to 200. */
export function parseName(value: string, field: string): string {
  return parseText(value, field, { required: true, max: 200, trim: true });
}

/** Creates a program and the external entity of its currency. */
export async function insertProgram(
  tx: Tx,
  args: { accountId: string; name: string; currencyCode: string; isDefault: boolean },
): Promise<ProgramRow> {
  const id = newId("program");
  const [row] = await tx<Omit<ProgramRow, "external_entity_id">[]>`
    insert into programs (id, account_id, name, currency_code, is_default)
    values (${id}, ${args.accountId}, ${args.name}, ${args.currencyCode}, ${args.isDefault})
    returning id, account_id, name, currency_code, is_default, created_at`;
  const externalId = await ensureExternalEntity(tx, args.accountId, id, args.currencyCode);
  return Object.assign({}, row!, { external_entity_id: externalId });
}

/**
 * The program's external entity (the outside world) for one currency, created on first use.
 * Deposits and withdrawals post against it; it alone may go negative.
 */
export async function ensureExternalEntity(tx: Tx, accountId: string, programId: string, currencyCode: string): Promise<string> {
  await tx`
    insert into entities (id, account_id, program_id, name, type, currency_code, is_external)
    values (${newId("entity")}, ${accountId}, ${programId}, ${"External " + currencyCode}, 'external', ${currencyCode}, true)
    on conflict (account_id, program_id, currency_code) where is_external do nothing`;
  const [row] = await tx<{ id: string }[]>`
    select id from entities
    where account_id = ${accountId} and program_id = ${programId} and currency_code = ${currencyCode} and is_external`;
  return row!.id;
}

/**
 * Which program a request acts in: the one it names, which must belong to the caller, or the
 * caller's default. A program's owner never changes, so ownership is cached for the process.
 */
export function createProgramResolver(sql: Sql) {
  const owners = new Map<string, string>();
  return async function resolveProgram(principal: Principal, requested: string): ReturnType<ProgramResolver> {
    if (requested === "") return principal.defaultProgramId;
    let owner = owners.get(requested);
    if (owner === undefined && isId("program", requested)) {
      // Asked within the caller's account (the statement goes to that account's rows alone): a
      // program of another account is not found, as one that does not exist.
      const [row] = await sql<{ account_id: string }[]>`
        select account_id from programs where account_id = ${principal.accountId} and id = ${requested}`;
      if (row) {
        owner = row.account_id;
        if (owners.size > 100_000) owners.clear();
        owners.set(requested, owner);
      }
    }
    if (owner !== principal.accountId) throw notFound("program", requested);
    return requested;
  };
}

/** Finds the program a request acts in for a caller; `createProgramResolver` makes one. */
export type ProgramResolver = (principal: Principal, requested: string) => Promise<string>;

/** Who asks and where: what every command carries. */
export interface CommandScope {
  accountId: string;
  programId: string;
  requestId: string;
  /** W3C traceparent of the call's span, stored on the events the command causes. */
  traceparent: string;
}

/** The scope of a call: its caller's account, the program it acts in, its request id and trace. */
export async function commandScope(ctx: HandlerContext, resolveProgram: ProgramResolver, programId: string): Promise<CommandScope> {
  const principal = principalOf(ctx);
  return {
    accountId: principal.accountId,
    programId: await resolveProgram(principal, programId),
    requestId: requestIdOf(ctx),
    traceparent: traceOf(ctx).traceparent,
  };
}

/** A handler's way to a command's scope: who asks, and in which of their programs. */
export type Scope = (ctx: HandlerContext, programId: string) => Promise<CommandScope>;

/** The `Scope` of handlers that resolve programs with `resolveProgram`. */
export function scopeWith(resolveProgram: ProgramResolver): Scope {
  return (ctx, programId) => commandScope(ctx, resolveProgram, programId);
}

/** Reads one program of an account. */
export async function findProgram(sql: Sql | Tx, accountId: string, programId: string): Promise<ProgramRow> {
  const [row] = await sql<ProgramRow[]>`
    select p.id, p.account_id, p.name, p.currency_code, p.is_default, p.created_at, e.id as external_entity_id
    from programs p
    join entities e on e.account_id = p.account_id and e.program_id = p.id and e.is_external and e.currency_code = p.currency_code
    where p.account_id = ${accountId} and p.id = ${programId}`;
  if (!row) throw notFound("program", programId);
  return row;
}

/** Reads a page of an account's programs, newest first. */
export async function listPrograms(sql: Sql, accountId: string, limit: number, before?: string): Promise<ProgramRow[]> {
  return sql<ProgramRow[]>`
    select p.id, p.account_id, p.name, p.currency_code, p.is_default, p.created_at, e.id as external_entity_id
    from programs p
    join entities e on e.account_id = p.account_id and e.program_id = p.id and e.is_external and e.currency_code = p.currency_code
    where p.account_id = ${accountId} ${before ? sql`and p.id < ${before}` : sql``}
    order by p.id desc limit ${limit + 1}`;
}

/** The API form of a program. */
export function programToProto(row: ProgramRow): MessageInitShape<typeof ProgramSchema> {
  return {
    programId: row.id,
    programName: row.name,
    currencyCode: row.currency_code,
    externalEntityId: row.external_entity_id,
    isDefault: row.is_default,
    createdAt: timestampFromDate(row.created_at),
  };
}
