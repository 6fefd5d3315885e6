import type { Timestamp } from "@bufbuild/protobuf/wkt";
import {
  checkListFilters,
  checkNameFilter,
  FILTER_RPC_FIELDS,
  pipelinedTransaction,
  type ListFilters,
  type Sql,
  type Tx,
} from "@ledger/common";

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
  /** A LIKE pattern the lowered name must match (`nameContains`); only lists of named rows take it. */
  name?: string;
}

/** Checks the filters an RPC request carries (400 naming the field) and prepares them for SQL. */
export function parseRowFilters(filters: ListFilters): RowFilters {
  checkListFilters(filters, FILTER_RPC_FIELDS);
  const rows: RowFilters = { metadata: Object.entries(filters.metadata).map(([key, value]) => metadataDocuments(key, value)) };
  if (filters.createdAfter) rows.createdFrom = microsecondBound(filters.createdAfter);
  if (filters.createdBefore) rows.createdBefore = microsecondBound(filters.createdBefore);
  return rows;
}

/** The entity list's `name` filter as its RPC field carries it (400 naming the field), as a pattern. */
export function parseNameFilter(name: string | undefined): string | undefined {
  return name === undefined ? undefined : nameContains(checkNameFilter(name, { field: "name" }));
}

/**
 * The LIKE pattern of names that contain `text`: its wildcards and the escape character taken
 * literally. Lowered in SQL, as the name is, so both fold case by the same rules (the database's).
 * "Contains" rather than "starts with", since a person searching for a customer types any part of
 * the name ("smith" for "Jane Smith"); the trigram index serves both alike.
 */
export function nameContains(text: string): string {
  return `%${text.replace(/[\\%_]/g, "\\$&")}%`;
}

/**
 * Whether a name pattern holds a trigram the name index can look up: three letters or digits in a
 * row. Without one (as for "al" or "a-b"), Postgres would read the whole index for it, so the list
 * walks its id order instead, as for any filter that matches many rows.
 */
export function nameIndexable(pattern: string): boolean {
  return /[\p{L}\p{N}]{3}/u.test(pattern);
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
 * The most rows metadata filters (or a name filter) may match, and a created_at range hold, for a page to be sorted
 * from all of them rather than found by walking the list's id order
 * (docs/architecture.md#listing-and-searching). Reading a range's rows in time order is cheap, so
 * its bound is higher.
 */
export const MAX_METADATA_CANDIDATES = 1_000;
export const MAX_RANGE_CANDIDATES = 5_000;

/** What a list reads. Every name here is SQL written in code. */
export interface ListSpec {
  /** `select <columns> from <tables>`. */
  select: string;
  /**
   * The account whose rows are listed: `column` (such as `account_id`, or `l.account_id` with an
   * alias) must equal `id`. Every list names it, so each is read from one account's rows (one shard
   * of a distributed Postgres, docs/scaling.md).
   */
  account: { column: string; id: string };
  /** The time-ordered id pages are keyed on, newest first: `id`, or `l.id` with an alias. */
  key: string;
  /** The columns the filters apply to. */
  createdAt: string;
  metadata: string;
  /** The name column, for lists of named rows (the `name` filter). */
  name?: string;
  /** Whether an index serves `createdAt` within the list's scope, as (program_id, created_at) does. */
  timeIndexed: boolean;
}

/** The settings of a metadata filter's candidate read: bitmap scans only (`#fromCandidates`). */
const BITMAP_SCANS_ONLY = "set local enable_seqscan = off; set local enable_indexscan = off; set local enable_indexonlyscan = off";

/**
 * One page of a list: a select built from SQL written here and numbered parameters, sent as an
 * unnamed statement so that Postgres plans it for this call's values (a prepared statement would
 * soon run one generic plan for every value).
 */
export class ListQuery {
  readonly #conditions: string[] = [];
  readonly #params: Array<string | number> = [];

  constructor(private readonly spec: ListSpec) {
    this.where(`${spec.account.column} = ${this.param(spec.account.id)}`);
  }

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
   * Reads `limit` rows within `filters`, newest first, below the id `before` when given.
   *
   * The best way to a page depends on how many rows the filters match, which the planner often
   * misjudges: it reckons matches are spread evenly along the id order, and a metadata value that
   * happens to be in its statistics' sample looks a hundred times commoner than it is. Either way it
   * walks the ids from the newest and passes hundreds of thousands of rows for a value a hundred
   * rows hold, or for a range that lies far back. So the candidates are read first: a metadata or
   * name filter's through bitmap scans of the indexes alone, a range's (where an index serves it) in
   * time order, each up to its bound. When that is all of them, the page is sorted from them;
   * otherwise the filters match many rows, and walking the ids finds a page soon.
   */
  async page<T extends object>(sql: Sql, filters: RowFilters, page: { limit: number; before?: string | undefined }): Promise<T[]> {
    const { spec } = this;
    // Parameters are text, cast in SQL: typed as jsonb or timestamptz, the driver would encode them
    // itself (a document as a JSON string, a time through Date, which keeps milliseconds only).
    if (filters.createdFrom) this.where(`${spec.createdAt} >= ${this.param(filters.createdFrom)}::text::timestamptz`);
    if (filters.createdBefore) this.where(`${spec.createdAt} < ${this.param(filters.createdBefore)}::text::timestamptz`);
    for (const documents of filters.metadata) {
      this.where(`(${documents.map((doc) => `${spec.metadata} @> ${this.param(doc)}::text::jsonb`).join(" or ")})`);
    }
    if (filters.name !== undefined) {
      if (!spec.name) throw new Error("this list has no name to filter");
      this.where(`lower(${spec.name}) like lower(${this.param(filters.name)}::text)`);
    }
    if (page.before) this.where(`${spec.key} < ${this.param(page.before)}`);
    const rows = `${spec.select}\nwhere ${this.#conditions.join("\n  and ")}`;
    const limit = this.param(page.limit);
    let found: T[] | undefined;
    if (filters.metadata.length > 0 || (filters.name !== undefined && nameIndexable(filters.name))) {
      found = await this.#fromCandidates<T>(sql, `${rows}\nlimit ${MAX_METADATA_CANDIDATES + 1}`, MAX_METADATA_CANDIDATES, limit, true);
    } else if (spec.timeIndexed && (filters.createdFrom || filters.createdBefore)) {
      // Ordered by created_at, the candidates can only come from the time index, which stops at the bound.
      const inTime = `${rows}\norder by ${spec.createdAt} limit ${MAX_RANGE_CANDIDATES + 1}`;
      found = await this.#fromCandidates<T>(sql, inTime, MAX_RANGE_CANDIDATES, limit, false);
    }
    return found ?? sql.unsafe<T[]>(`${rows}\norder by ${spec.key} desc limit ${limit}`, this.#params, { prepare: false });
  }

  /**
   * The page sorted from `candidates` (a select of at most `max + 1` rows), or undefined when it
   * found more than `max`. With `bitmapOnly`, in a transaction whose planner may only use bitmap
   * scans, so the rows come from the filters' indexes, never from a walk of a table or an index.
   */
  async #fromCandidates<T extends object>(sql: Sql, candidates: string, max: number, limit: string, bitmapOnly: boolean) {
    const key = this.spec.key.replace(/^\w+\./, "");
    const text = `select *, count(*) over ()::int as candidates from (${candidates}) candidate\norder by ${key} desc limit ${limit}`;
    const read = (tx: Sql | Tx) => tx.unsafe<Array<T & { candidates?: number }>>(text, this.#params, { prepare: false });
    const found = bitmapOnly
      ? await pipelinedTransaction(sql, async (tx) => (await Promise.all([tx.unsafe(BITMAP_SCANS_ONLY), read(tx)]))[1])
      : await read(sql);
    if ((found[0]?.candidates ?? 0) > max) return undefined;
    for (const row of found) delete row.candidates;
    return found as T[];
  }
}
