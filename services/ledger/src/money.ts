// The money core, in three parts: the rules over in-memory balances (money-rules.ts, no I/O),
// loading and locking what a set of commands needs, or taking it from the process's cache
// (money-load.ts), and writing what they did in one statement (money-persist.ts). This file puts
// them together for a transaction.
import { outboxWrite, type Sql, type Tx } from "@ledger/common";
import { cachedBook, type EntityCache, loadBook } from "./money-load.js";
import { type AccountOutboxWrite, lockForChain, persist } from "./money-persist.js";
import { Book, type BookEntity, type MoneyCommand } from "./money-rules.js";
import type { AlertOrigin } from "./balance-alert-events.js";
import { AlertWatch } from "./balance-alert-watch.js";

export { BOOK_ENTITY_COLUMNS, EntityCache, namedEntityIds } from "./money-load.js";
export {
  Book,
  expectOk,
  parseLegs,
  type LegSpec,
  type MoneyCommand,
  type Outcome,
  type ReservationRow,
} from "./money-rules.js";

/**
 * A book to apply commands to, in order, with `book.apply` (and `checkpoint`/`rollback` for a run
 * that is all or nothing), calling `unitDone` after each unit (a call, or a batch call as a whole):
 * balance alerts cross on the balances a unit leaves (balance-alert-watch.ts). `write` then sends
 * the book's effects as one statement in the transaction the book was opened in.
 */
export interface OpenBook {
  book: Book;
  unitDone(origin: AlertOrigin): void;
  write(): Promise<void>;
}

/**
 * A book over cached rows, opened before any connection is chosen: `writeOn` sends its effects as
 * one statement on `on`, and fails with 40001 when a row the rules read changed since it was cached.
 * With `chain`, the rows it leaves are cached before it is answered (`WriteChain`).
 */
export interface CachedOpenBook {
  book: Book;
  unitDone(origin: AlertOrigin): void;
  writeOn(on: Sql | Tx, chain?: WriteChain): Promise<void>;
}

/**
 * A write another batch may rest on before it commits (docs/decisions/chained-writes.md): it
 * locks the rows the rules read and asks for its transaction's id first, and once that is
 * answered the rows the write will leave are cached under that id and `cached` is called. Should
 * the transaction not commit, no row ever has that version, and a write resting on one fails its
 * version check.
 */
export interface WriteChain {
  cached(): void;
}

/**
 * Loads and locks what `commands` need inside `tx`. `write` is sent, not awaited, by the caller,
 * which sends COMMIT right behind it and awaits both, so the write costs no round trip of its own.
 */
export async function openBook(
  tx: Tx,
  commands: MoneyCommand[],
  cache: EntityCache,
  /** The NATS subject of an event type (`eventSubject` with the service's prefix). */
  subjectOf: (type: string) => string,
): Promise<OpenBook> {
  const now = new Date();
  return writable(tx, await loadBook(tx, commands, cache, now), cache, subjectOf, now);
}

/**
 * A book over the process's cached rows, when `commands` need nothing else
 * (docs/architecture.md#cached-balances). Written on `sql` alone it is a transaction of one
 * statement: nothing was read before it, so it needs no BEGIN or COMMIT, and the whole batch costs
 * one round trip; written in a pipelined transaction, it shares that round trip with other writes
 * (idempotency keys). `{ busy }` and undefined are `cachedBook`'s: entities another transaction of
 * this process is writing, or commands the cache cannot serve.
 */
export function openCachedBook(
  commands: MoneyCommand[],
  cache: EntityCache,
  subjectOf: (type: string) => string,
): CachedOpenBook | { busy: string[] } | undefined {
  const now = new Date();
  const book = cachedBook(commands, cache, now);
  if (!(book instanceof Book)) return book;
  const alerts = new AlertWatch(book);
  // One statement outside BEGIN is a transaction of its own; persist only ever runs one statement.
  return {
    book,
    unitDone: (origin) => alerts.unitDone(origin),
    writeOn: (on, chain) => writeBook(on as Tx, book, alerts, cache, subjectOf, now, chain),
  };
}

function writable(tx: Tx, book: Book, cache: EntityCache, subjectOf: (type: string) => string, now: Date): OpenBook {
  const alerts = new AlertWatch(book);
  return { book, unitDone: (origin) => alerts.unitDone(origin), write: () => writeBook(tx, book, alerts, cache, subjectOf, now) };
}

/**
 * Sends `book`'s effects, with its balance alerts' crossings, as one statement on `tx`, and caches
 * the rows as that statement left them: once it is answered, or with `chain` as soon as the
 * transaction's id is known.
 */
function writeBook(
  tx: Tx,
  book: Book,
  alerts: AlertWatch,
  cache: EntityCache,
  subjectOf: (type: string) => string,
  now: Date,
  chain?: WriteChain,
): Promise<void> {
  const effects = book.effects();
  const crossed = alerts.writes(now);
  const events: Array<{ id: string; type: string; accountId: string; payload: Uint8Array }> =
    crossed.events.length === 0 ? effects.events : [...effects.events, ...crossed.events];
  const read = book.rows().flatMap((row) => (row.is_external ? [] : [{ id: row.id, account_id: row.account_id, version: row.version }]));
  const outbox = outboxRowsByAccount(events, subjectOf);
  // Each changed ordinary row as this write leaves it, under the version the write gives it. Cached
  // before COMMIT is answered: should the transaction roll back, no row ever has that version,
  // and a write resting on it fails its check.
  const cacheRowsLeft = (versionOf: (id: string) => string | undefined) => {
    for (const state of effects.changedEntities) {
      const version = versionOf(state.row.id);
      if (state.row.is_external || version === undefined) continue;
      const row: BookEntity = Object.assign({}, state.row, {
        posted: state.posted,
        pending_debits: state.pendingDebits,
        pending_credits: state.pendingCredits,
        held: state.held,
        version,
      });
      const alertsAfter = crossed.alertsOf.get(row.id);
      if (alertsAfter) row.alerts = alertsAfter;
      cache.remember(row);
    }
  };
  if (chain) {
    // Every changed ordinary row gets the transaction's id as its xmin. Not cached again at the
    // answer: a batch resting on these rows may have cached newer ones by then.
    lockForChain(tx, read).then(
      (version) => {
        cacheRowsLeft(() => version);
        chain.cached();
      },
      () => {}, // the write fails with the transaction, and its caller hears that
    );
  }
  const written = persist(tx, effects, outbox, now, read, crossed.changes);
  if (chain) return written.then((w) => cache.refreshExternalBalances(w.externals));
  return written.then((w) => {
    cache.refreshExternalBalances(w.externals);
    const versions = new Map(w.ordinary.map((v) => [v.id, v.version]));
    cacheRowsLeft((id) => versions.get(id));
  });
}

/**
 * The outbox rows of a write: one per account, each with that account's events in order, so each
 * row lives with its account's other rows (docs/scaling.md). A batch of one account, as every batch
 * with LEDGER_BATCH_ONE_ACCOUNT, writes one row.
 */
function outboxRowsByAccount(
  events: ReadonlyArray<{ id: string; type: string; accountId: string; payload: Uint8Array }>,
  subjectOf: (type: string) => string,
): AccountOutboxWrite[] {
  const byAccount = new Map<string, Array<{ id: string; subject: string; payload: Uint8Array }>>();
  for (const e of events) {
    const event = { id: e.id, subject: subjectOf(e.type), payload: e.payload };
    const list = byAccount.get(e.accountId);
    if (list) list.push(event);
    else byAccount.set(e.accountId, [event]);
  }
  return [...byAccount].map(([accountId, list]) => Object.assign(outboxWrite(list), { accountId }));
}
