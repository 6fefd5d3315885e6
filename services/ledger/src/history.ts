// An entity's balances over time: as of a moment, and statements of the legs posted in a window.
// The write statement records both (money-persist.ts); here they are read, each with an index
// probe or a range scan (docs/architecture.md#balance-history).
import type { MessageInitShape } from "@bufbuild/protobuf";
import {
  decodeCursorValue,
  encodeCursorValue,
  invalidArgument,
  isId,
  isoMicros,
  notFound,
  timestampOfMicros,
  type PageResult,
  type Sql,
} from "@ledger/common";
import type { GetEntityStatementResponseSchema, StatementEntrySchema } from "@ledger/proto/ledger/v1/ledger_pb.js";
import type { EntityRow } from "./entities.js";
import { directionToProto, type LegDirection } from "./groups.js";

/** Statement page sizes (docs/api.md#balances-over-time): larger than other lists', as a statement is read whole. */
export const DEFAULT_STATEMENT_PAGE = 100;
export const MAX_STATEMENT_PAGE = 1000;

/**
 * A moment as SQL takes it: ISO 8601 text to the microsecond, to be cast `::text::timestamptz`. A
 * parameter Postgres types as timestamptz would go through postgres.js's Date, losing the microseconds.
 */
function sqlMoment(micros: bigint): string {
  return isoMicros(timestampOfMicros(micros));
}

/**
 * An entity of a program with its balances as they stood at `asOf` (microseconds since the epoch):
 * those of its last change stamped before that moment, or zeros when it has none. A moment the
 * database's clock has not reached is refused: changes may still be stamped before it.
 */
export async function findEntityAsOf(sql: Sql, accountId: string, programId: string, entityId: string, asOf: bigint): Promise<EntityRow> {
  if (!isId("entity", entityId)) throw notFound("entity", entityId);
  const moment = sqlMoment(asOf);
  const [row] = await sql<Array<EntityRow & { future: boolean }>>`
    select e.id, e.account_id, e.program_id, e.name, e.type, e.status, e.status_reason, e.currency_code, e.metadata,
      e.is_external, e.overdraft_limit, e.created_at, e.updated_at,
      coalesce(h.posted, 0) as posted, coalesce(h.pending_debits, 0) as pending_debits,
      coalesce(h.pending_credits, 0) as pending_credits, coalesce(h.held, 0) as held,
      ${moment}::text::timestamptz > clock_timestamp() as future
    from entities e
      left join lateral (
        select posted, pending_debits, pending_credits, held from entity_balance_history
        where account_id = e.account_id and entity_id = e.id and changed_at < ${moment}::text::timestamptz
        order by changed_at desc limit 1) h on true
    where e.id = ${entityId} and e.account_id = ${accountId} and e.program_id = ${programId}`;
  if (!row) throw notFound("entity", entityId);
  if (row.future) throw invalidArgument("as_of must not be in the future", { field: "as_of" });
  return row;
}

/** Where a statement page resumes: after the leg posted at `at` (microseconds) with `seq`. */
interface StatementPosition {
  at: bigint;
  seq: number;
}

/** A page of a statement, as its query reads it. */
interface StatementRow {
  opening: bigint | null;
  closing: bigint | null;
  id: string | null;
  group_id: string;
  direction: LegDirection;
  amount: bigint;
  description: string;
  posted_us: bigint;
  posted_seq: number;
  posted_after: bigint;
}

/** A statement page's entry, as the answer takes it. */
type Entry = MessageInitShape<typeof StatementEntrySchema>;

/** What a statement page asks for, checked. */
export interface StatementRequest {
  from: bigint;
  to: bigint;
  limit: number;
  /** The previous page's last entry, from its cursor. */
  after?: StatementPosition;
}

/** Checks a statement request's window and page; throws the 400 it answers. */
export function statementRequest(from: bigint, to: bigint, limit: number, cursor: string): StatementRequest {
  if (from >= to) throw invalidArgument("from must be before to", { field: "from" });
  if (!Number.isInteger(limit) || limit < 0 || limit > MAX_STATEMENT_PAGE) {
    throw invalidArgument(`limit must be between 1 and ${MAX_STATEMENT_PAGE}`, { field: "limit" });
  }
  const request: StatementRequest = { from, to, limit: limit === 0 ? DEFAULT_STATEMENT_PAGE : limit };
  if (cursor !== "") request.after = decodePosition(cursor);
  return request;
}

function decodePosition(cursor: string): StatementPosition {
  return decodeCursorValue(cursor, (decoded) => {
    const { t, s } = (decoded ?? {}) as { t?: unknown; s?: unknown };
    if (typeof t !== "string" || !/^\d{1,16}$/.test(t) || typeof s !== "number" || !Number.isSafeInteger(s) || s < 0) return undefined;
    return { at: BigInt(t), seq: s };
  });
}

/**
 * One page of an entity's statement: the legs that became posted on it in [from, to), oldest
 * first, after the cursor's position; and its posted balance before `from` and before `to`, each the
 * `posted_after` of the last leg posted before that moment. One statement, so one snapshot: the
 * page's entries, opening and closing always agree.
 */
export async function statementPage(
  sql: Sql,
  entity: EntityRow,
  request: StatementRequest,
): Promise<MessageInitShape<typeof GetEntityStatementResponseSchema>> {
  const { after } = request;
  const [from, to] = [sqlMoment(request.from), sqlMoment(request.to)];
  const balanceBefore = (moment: string) => sql`
    (select posted_after from legs where account_id = ${entity.account_id} and entity_id = ${entity.id} and posted_at < ${moment}::text::timestamptz
     order by posted_at desc, posted_seq desc limit 1)`;
  // The page's legs are taken first, in the index's order, and each one's group is then probed
  // for its description: joined in one step, the planner may hash the account's every group for a
  // window it expects to be small (docs/architecture.md#balance-history).
  // Each row becomes its entry as it arrives (forEach) rather than in an array postgres.js keeps
  // for the query: that array dates from the connection's previous query, so it is often in V8's
  // old generation already, and the rows it held lived on until a full collection
  // (docs/decisions/no-allocation-site-pretenuring.md).
  const entries: Entry[] = [];
  let opening: bigint | null = null;
  let closing: bigint | null = null;
  let hasNext = false;
  let last: StatementRow | undefined;
  await sql<StatementRow[]>`
    select ${balanceBefore(from)} as opening, ${balanceBefore(to)} as closing, p.*
    from (values (1)) as one
      left join lateral (
        select l.id, l.group_id, l.direction, l.amount, l.posted_seq, l.posted_after, l.posted_us,
          (select g.description from transaction_groups g where g.account_id = l.account_id and g.id = l.group_id) as description
        from (
          select id, account_id, group_id, direction, amount, posted_seq, posted_after, posted_at,
            (extract(epoch from posted_at) * 1000000)::int8 as posted_us
          from legs
          where account_id = ${entity.account_id} and entity_id = ${entity.id} and posted_at >= ${from}::text::timestamptz and posted_at < ${to}::text::timestamptz
            ${after ? sql`and (posted_at, posted_seq) > (${sqlMoment(after.at)}::text::timestamptz, ${after.seq}::int)` : sql``}
          order by posted_at, posted_seq
          limit ${request.limit + 1}) l
        order by l.posted_at, l.posted_seq) as p on true`.forEach((r) => {
    opening = r.opening;
    closing = r.closing;
    if (r.id === null) return;
    if (entries.length === request.limit) {
      hasNext = true;
      return;
    }
    last = r;
    entries.push({
      transactionId: r.id,
      transactionGroupId: r.group_id,
      direction: directionToProto(r.direction),
      amount: r.amount,
      description: r.description,
      postedAt: timestampOfMicros(r.posted_us),
      postedAfter: r.posted_after,
    });
  });
  const page: PageResult = {
    limit: request.limit,
    hasNext,
    nextCursor: hasNext && last ? encodeCursorValue({ t: `${last.posted_us}`, s: last.posted_seq }) : "",
  };
  return {
    statement: {
      entityId: entity.id,
      currencyCode: entity.currency_code,
      from: timestampOfMicros(request.from),
      to: timestampOfMicros(request.to),
      openingPosted: opening ?? 0n,
      closingPosted: closing ?? 0n,
    },
    entries,
    page,
  };
}
