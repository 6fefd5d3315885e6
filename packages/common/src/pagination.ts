import { invalidArgument } from "./errors.js";

/** Page size when a request gives none, and the largest allowed (docs/api.md#pagination). */
export const DEFAULT_PAGE_SIZE = 20;
export const MAX_PAGE_SIZE = 100;

/** A validated page request: lists are keyset-paginated on time-ordered ids, newest first. */
export interface PageRequest {
  limit: number;
  /** Return only rows whose id sorts below this one. */
  before?: string;
}

/** The `page` field of a list response. */
export interface PageResult {
  limit: number;
  hasNext: boolean;
  nextCursor: string;
}

/**
 * Validates `limit` (0 means the default) and decodes `cursor`. `isValidId` checks the id inside
 * the cursor, so a forged cursor is refused before it reaches a query.
 */
export function parsePageRequest(limit: number, cursor: string, isValidId: (id: string) => boolean): PageRequest {
  if (!Number.isInteger(limit) || limit < 0 || limit > MAX_PAGE_SIZE) {
    throw invalidArgument(`limit must be between 1 and ${MAX_PAGE_SIZE}`, { limit });
  }
  const page: PageRequest = { limit: limit === 0 ? DEFAULT_PAGE_SIZE : limit };
  if (cursor !== "") page.before = decodeCursor(cursor, isValidId);
  return page;
}

function decodeCursor(cursor: string, isValidId: (id: string) => boolean): string {
  return decodeCursorValue(cursor, (decoded) => {
    const id = (decoded as { b?: unknown } | null)?.b;
    return typeof id === "string" && isValidId(id) ? id : undefined;
  });
}

/** An opaque cursor that resumes a list below `id`. */
export function encodeCursor(id: string): string {
  return encodeCursorValue({ b: id });
}

/** An opaque cursor carrying `value` (a list's keyset position), as JSON in base64url. */
export function encodeCursorValue(value: object): string {
  return Buffer.from(JSON.stringify(value), "utf8").toString("base64url");
}

/**
 * What a cursor made by `encodeCursorValue` carries, as `read` makes it of the decoded JSON; 400
 * `invalid_request` for anything else (`read` answers undefined for a value that is not one of its own).
 */
export function decodeCursorValue<T>(cursor: string, read: (decoded: unknown) => T | undefined): T {
  const malformed = () => invalidArgument("cursor is malformed: pass the next_cursor of the previous page unchanged");
  if (!/^[A-Za-z0-9_-]{1,200}$/.test(cursor)) throw malformed();
  let decoded: unknown;
  try {
    decoded = JSON.parse(Buffer.from(cursor, "base64url").toString("utf8"));
  } catch {
    throw malformed();
  }
  const value = read(decoded);
  if (value === undefined) throw malformed();
  return value;
}

/**
 * Turns `limit + 1` fetched rows into one page: the extra row only tells that another page exists.
 */
export function toPage<T>(rows: T[], page: PageRequest, idOf: (row: T) => string): { items: T[]; page: PageResult } {
  const hasNext = rows.length > page.limit;
  const items = hasNext ? rows.slice(0, page.limit) : rows;
  return {
    items,
    page: { limit: page.limit, hasNext, nextCursor: hasNext ? encodeCursor(idOf(items[items.length - 1]!)) : "" },
  };
}
