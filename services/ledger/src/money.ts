// The money core, in three parts: the rules over in-memory balances (money-rules.ts, no I/O),
// loading and locking what a set of commands needs (money-load.ts), and writing what they did in
// one statement (money-persist.ts). This file puts them together for a transaction.
import { outboxWrite, type Tx } from "@ledger/common";
import { type ExternalEntityCache, loadBook } from "./money-load.js";
import { persist } from "./money-persist.js";
import type { Book, MoneyCommand } from "./money-rules.js";

export { ExternalEntityCache } from "./money-load.js";
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
 * Loads and locks what `commands` need inside `tx` and hands back the book to apply them to, in
 * order, with `book.apply` (and `checkpoint`/`rollback` for a run that is all or nothing).
 * `write` then sends the book's effects as one statement, not awaited: the caller sends COMMIT
 * right behind it and awaits both, so the write costs no round trip of its own.
 */
export async function openBook(
  tx: Tx,
  commands: MoneyCommand[],
  externals: ExternalEntityCache,
  /** The NATS subject of an event type (`eventSubject` with the service's prefix). */
  subjectOf: (type: string) => string,
): Promise<{ book: Book; write(): Promise<unknown> }> {
  const now = new Date();
  const book = await loadBook(tx, commands, externals, now);
  return {
    book,
    write() {
      const effects = book.effects();
      const outbox = outboxWrite(effects.events.map((e) => ({ id: e.id, subject: subjectOf(e.type), payload: e.payload })));
      return persist(tx, effects, outbox, now).then((balances) => externals.refreshBalances(balances));
    },
  };
}
