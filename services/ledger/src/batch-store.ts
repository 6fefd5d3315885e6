import {
  claimIdempotencyKeys,
  insertIdempotencyKeys,
  pipelinedTransaction,
  sentWrites,
  settleIdempotencyKeys,
  type Claim,
  type KeyClaim,
  type Sql,
  type Tx,
} from "@ledger/common";
import { EntityCache, openBook, openCachedBook, type CachedOpenBook, type MoneyCommand, type OpenBook } from "./money.js";

/**
 * The work of one transaction: its statements go on `tx`; those it sends without awaiting go in
 * `writes`, which are awaited with the commit.
 */
export type TransactionWork<T> = (tx: Tx, writes: Promise<unknown>[]) => Promise<T>;

/** A key's response to store, under its account and key. */
export interface StoredAnswer {
  accountId: string;
  key: string;
  response: Uint8Array;
}

/** The idempotency keys' statements a batch sends (packages/common/src/idempotency.ts). */
export interface KeyStatements {
  /** Claims keys, passed sorted: each answers with its own claim or its own error. */
  claim(tx: Tx, claims: KeyClaim[]): Promise<Array<Claim | Error>>;
  /** Stores claimed keys' responses and deletes refused ones' claims; sent, not awaited. */
  settle(tx: Tx, completed: StoredAnswer[], refused: Array<{ accountId: string; key: string }>): Promise<unknown>[];
  /** Inserts keys never claimed, with their responses; fails the transaction when one exists. */
  insert(tx: Tx, keys: Array<StoredAnswer & { fingerprint: Buffer }>): Promise<unknown>[];
}

/**
 * Where batches are applied: transactions, the books commands apply to, the idempotency keys'
 * statements, and the process's cache of entity rows (docs/architecture.md#cached-balances) that
 * cached books rest on. Postgres in the service (`postgresBatchStore`); a test may give a fake, to
 * drive the way batches go (batch-paths.ts) with no database.
 */
export interface BatchStore {
  cache: EntityCache;
  /** Runs `work` in one pipelined transaction: BEGIN goes with its first statement, COMMIT right behind its writes. */
  transaction<T>(work: TransactionWork<T>): Promise<T>;
  /** Runs `work`, one statement, on its own: a transaction with no BEGIN or COMMIT. */
  alone<T>(work: TransactionWork<T>): Promise<T>;
  /** Loads and locks in `tx` what `commands` need (money.ts `openBook`). */
  openBook(tx: Tx, commands: MoneyCommand[]): Promise<OpenBook>;
  /** A book over the cache alone, `{ busy }` or undefined (money.ts `openCachedBook`). */
  openCachedBook(commands: MoneyCommand[]): CachedOpenBook | { busy: string[] } | undefined;
  keys: KeyStatements;
}

/** Batches applied in Postgres on `sql`. */
export function postgresBatchStore(options: {
  sql: Sql;
  /** The NATS subject of an event type, for the outbox rows a transaction writes. */
  subjectOf: (type: string) => string;
  /** Ordinary entities kept for the cached path (docs/architecture.md#cached-balances); 0 turns it off. */
  entityCacheSize: number;
}): BatchStore {
  const { sql, subjectOf } = options;
  const cache = new EntityCache(options.entityCacheSize);
  return {
    cache,
    transaction: (work) => pipelinedTransaction(sql, work),
    async alone(work) {
      const writes = sentWrites();
      const result = await work(sql as unknown as Tx, writes);
      await Promise.all(writes);
      return result;
    },
    openBook: (tx, commands) => openBook(tx, commands, cache, subjectOf),
    openCachedBook: (commands) => openCachedBook(commands, cache, subjectOf),
    keys: { claim: claimIdempotencyKeys, settle: settleIdempotencyKeys, insert: insertIdempotencyKeys },
  };
}
