import type { Timestamp } from "@bufbuild/protobuf/wkt";
import { checkListFilters, FILTER_RPC_FIELDS, type ListFilters, type Sql } from "@ledger/common";

// The ledger's lists in SQL: the filters of a request checked and turned into conditions, and the
// select that carries them (docs/architecture.md#listing-and-searching).

/** A request's filters, checked and in the form the conditions take. */
export interface RowFilters {
  /** created_at at or after this, as timestamptz text (to the microsecond). */
  createdFrom?: string;
  /** created_at before this. */
  createdBefore?: string;
  /** One entry per metadata filter: JSON documents, one of which the metadata must contain. */
  metadata: string[][];
}

/** Checks the filters an RPC request carries (400 naming the field) and prepares them for SQL. */
export function parseRowFilters(filters: ListFilters): RowFilters {
  checkListFilters(filters, FILTER_RPC_FIELDS);
  const rows: RowFilters = { metadata: Object.entries(filters.metadata).map(([key, value]) => metadataDocuments(key, value)) };
  if (filters.createdAfter) rows.createdFrom = microsecondBound(filters.createdAfter);
  if (filters.createdBefore) rows.createdBefore = microsecondBound(filters.createdBefore);
  return rows;
}

/** A JSON number, as JSON writes one. */
const JSON_NUMBER = /^-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?$/;

/**
 * The documents a metadata filter matches by containment (`@>`): `{key: value}` with the value as a
 * string, and as the boolean or number it spells. The number is written as JavaScript writes it,
 * which is how every stored number was written (metadata arrives as JSON or a protobuf Struct,
 * both read into doubles), so `5`, `5.0` and `5e0` all find a stored 5. Containment of a top-level
 * key compares a string, number or boolean exactly (numbers by value); an array or object never
 * equals a scalar there.
 */
export function metadataDocuments(key: string, value: string): string[] {
  const documents = [JSON.stringify({ [key]: value })];
  if (value === "true" || value === "false") documents.push(JSON.stringify({ [key]: value === "true" }));
  else if (JSON_NUMBER.test(value) && Number.isFinite(Number(value))) documents.push(JSON.stringify({ [key]: Number(value) }));
  return documents;
}

/**
 * A time as timestamptz text, rounded up to the microsecond, Postgres's precision: created_at is a
 * whole microsecond, so `created_at >= t` and `created_at < t` both hold exactly when they hold
 * against t rounded up. Past year 9999 (rounding up its last microsecond) is `infinity`.
 */
export function microsecondBound(ts: Timestamp): string {
  let seconds = ts.seconds;
  let micros = Math.ceil(ts.nanos / 1000);
  if (micros === 1_000_000) {
    seconds += 1n;
    micros = 0;
  }
  const iso = new Date(Number(seconds) * 1000).toISOString();
  if (!/^\d{4}-/.test(iso)) return "infinity";
  return `${iso.slice(0, 19)}.${String(micros).padStart(6, "0")}Z`;
}

/**
 * The most rows a closed created_at range may hold to be read whole through its (scope, created_at)
 * index and sorted, rather than found by walking the list's id order (docs/architecture.md#listing-and-searching).
 */
export const NARROW_RANGE_ROWS = 5_000;

/** What a list reads. Every name here is SQL written in code. */
export interface ListSpec {
  /** `select <columns> from <tables>`. */
  select: string;
  /** The time-ordered id pages are keyed on, newest first: `id`, or `l.id` with an alias. */
  key: string;
  /** The columns the filters apply to. */
  createdAt: string;
  metadata: string;
  /** For a list of one table with an index on (column, created_at): that table and column, and the column's value. */
  timeIndex?: { table: string; column: string; value: string };
}

/**
 * One page of a list: a select built from SQL written here and numbered parameters, sent as an
 * unnamed statement so that Postgres plans it for this call's values. A prepared statement would
 * soon run one generic plan for every value, and the best plan of a filtered list depends on how
 * many rows a value matches: a value most rows hold is found fastest by walking the list's id
 * order, a rare one through the metadata or created_at index.
 */
export class ListQuery {
  readonly #conditions: string[] = [];
  readonly #params: Array<string | number> = [];

  constructor(private readonly spec: ListSpec) {}

  /** The placeholder of `value`, sent as a parameter (a client's value never enters the SQL text). */
  param(value: string | number): string {
    this.#params.push(value);
    return `$${this.#params.length}`;
  }

  /** Adds a condition (SQL written in code) that every row must meet. */
  where(condition: string): this {
    this.#conditions.push(condition);
    return this;
  }

  /**
   * Reads `limit` rows within `filters`, newest first, below the id `before` when given. A closed
   * range (`created_before` given) of a list with a time index is first counted there, up to
   * NARROW_RANGE_ROWS + 1: the planner reckons that rows in a range are spread evenly along the id
   * order, so it walks that order from the newest row even when the range lies far back and every
   * row it passes is newer; a range found narrow is read whole through the time index and sorted.
   */
  async page<T>(sql: Sql, filters: RowFilters, page: { limit: number; before?: string | undefined }): Promise<T[]> {
    const { spec } = this;
    // Parameters are text, cast in SQL: typed as jsonb or timestamptz, the driver would encode them
    // itself (a document as a JSON string, a time through Date, which keeps milliseconds only).
    if (filters.createdFrom) this.where(`${spec.createdAt} >= ${this.param(filters.createdFrom)}::text::timestamptz`);
    if (filters.createdBefore) this.where(`${spec.createdAt} < ${this.param(filters.createdBefore)}::text::timestamptz`);
    for (const documents of filters.metadata) {
      this.where(`(${documents.map((doc) => `${spec.metadata} @> ${this.param(doc)}::text::jsonb`).join(" or ")})`);
    }
    if (page.before) this.where(`${spec.key} < ${this.param(page.before)}`);
    const rows = `${spec.select}\nwhere ${this.#conditions.join("\n  and ")}`;
    const limit = this.param(page.limit);
    const narrow = spec.timeIndex && filters.createdBefore && (await rowsInRange(sql, spec.timeIndex, filters)) <= NARROW_RANGE_ROWS;
    // OFFSET 0 keeps the planner from pulling the sort's order into the rows' scan.
    const text = narrow
      ? `select * from (${rows}\noffset 0) narrow\norder by ${spec.key} desc limit ${limit}`
      : `${rows}\norder by ${spec.key} desc limit ${limit}`;
    return sql.unsafe<T[]>(text, this.#params, { prepare: false });
  }
}

/** How many rows of a time index's scope lie in the created range, counted up to NARROW_RANGE_ROWS + 1. */
async function rowsInRange(sql: Sql, index: NonNullable<ListSpec["timeIndex"]>, filters: RowFilters): Promise<number> {
  const [row] = await sql.unsafe<{ n: number }[]>(
    `select count(*)::int as n from (
       select from ${index.table}
       where ${index.column} = $1 and created_at >= $2::text::timestamptz and created_at < $3::text::timestamptz
       limit ${NARROW_RANGE_ROWS + 1}) in_range`,
    [index.value, filters.createdFrom ?? "-infinity", filters.createdBefore ?? "infinity"],
    { prepare: true },
  );
  return row?.n ?? 0;
}
