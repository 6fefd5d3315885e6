import { create, toBinary } from "@bufbuild/protobuf";
import { StringValueSchema } from "@bufbuild/protobuf/wkt";
import type { DescMessage } from "@bufbuild/protobuf";
import { ConnectError } from "@connectrpc/connect";
import { createLogger, metricsRegistry, sentWrites, TransactionRolledBack, type Tx } from "@ledger/common";
import type { Counter } from "prom-client";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import type { BatchStore, KeyStatements, StoredAnswer, TransactionWork } from "./batch-store.js";
import { keyString, type Submission } from "./batch-units.js";
import { createBatcher } from "./batcher.js";
import { cachedBook } from "./money-load.js";
import { Book, EntityCache, type MoneyCommand, type WriteChain } from "./money.js";
import { type BookEntity, entityState } from "./money-rules.js";

// Which way group commit sends its batches (batch-paths.ts), driven with no database: a store that
// keeps its rows and keys in memory, a clock the test moves, and transactions that commit when the
// test lets them. What the scheduler and the paths decide is then the same on every run.

const ACCOUNT = "acct_paths";
const PROGRAM = "prg_paths";

/** A transaction of the fake store: its id (the version it gives the rows it writes), and what it writes at its commit. */
interface FakeTx {
  id: string;
  /** Its rows were cached under its id before its commit (a chained write): not cached again at the commit. */
  chained: boolean;
  books: Book[];
  completed: StoredAnswer[];
  refused: Array<{ accountId: string; key: string }>;
  inserted: Array<StoredAnswer & { fingerprint: Buffer }>;
}

/** A database error as postgres.js reports one: its SQLSTATE in `code`. */
const databaseError = (code: string, more: object = {}) => Object.assign(new Error(`SQLSTATE ${code}`), { code }, more);

/**
 * A database in memory: entity rows with their versions, and idempotency keys. A transaction's
 * writes take effect at its commit, all or none; a book written on a row version that is no longer
 * the row's is refused (40001), as the ledger's write refuses it, and so is an insert of a key that
 * exists (23505). `opened` lists the books in the order they were opened, each as the way it read
 * its rows and its commands' descriptions.
 */
class FakeStore implements BatchStore {
  readonly cache = new EntityCache(100);
  readonly rows = new Map<string, BookEntity>();
  readonly storedKeys = new Map<string, { fingerprint: Buffer; response: Uint8Array }>();
  readonly opened: string[] = [];
  /** The accounts of each book opened, in the same order as `opened`. */
  readonly accounts: string[][] = [];
  /** Errors the next transactions fail with instead of committing, one each. */
  readonly failures: Error[] = [];
  private gate: Promise<void> | undefined;
  /** The last transaction id given; a row's version is the id of the transaction that wrote it ("1" for the first rows). */
  private lastId = 1;

  readonly keys: KeyStatements = {
    claim: async (_tx, claims) =>
      claims.map((claim) => {
        const stored = this.storedKeys.get(keyString(claim));
        if (!stored) return { kind: "new" };
        return stored.fingerprint.equals(claim.fingerprint) ? { kind: "replay", response: stored.response } : new Error("conflict");
      }),
    settle: (tx, completed, refused) => {
      (tx as unknown as FakeTx).completed.push(...completed);
      (tx as unknown as FakeTx).refused.push(...refused);
      return [];
    },
    insert: (tx, keys) => {
      (tx as unknown as FakeTx).inserted.push(...keys);
      return [];
    },
  };

  /** Rows in the database; `cached` ones in the process's cache too. */
  constructor(rows: BookEntity[], cached: boolean) {
    for (const row of rows) {
      this.rows.set(row.id, row);
      if (cached) this.cache.remember(row);
    }
  }

  /** Holds every transaction before its commit until the answer is called. */
  pause(): () => void {
    let open!: () => void;
    this.gate = new Promise((resolve) => (open = resolve));
    return () => {
      this.gate = undefined;
      open();
    };
  }

  transaction<T>(work: TransactionWork<T>): Promise<T> {
    return this.run(work);
  }

  alone<T>(work: TransactionWork<T>): Promise<T> {
    return this.run(work);
  }

  openCachedBook(commands: MoneyCommand[]) {
    const book = cachedBook(commands, this.cache);
    if (!(book instanceof Book)) return book;
    this.opened.push(`cached ${names(commands)}`);
    this.accounts.push(accountsOf(commands));
    return { book, unitDone: () => {}, writeOn: (on: unknown, chain?: WriteChain) => this.write(on, book, chain) };
  }

  async openBook(tx: Tx, commands: MoneyCommand[]) {
    this.opened.push(`locked ${names(commands)}`);
    this.accounts.push(accountsOf(commands));
    const entities = new Map<string, ReturnType<typeof entityState>>();
    for (const command of commands) {
      if (command.kind !== "create") throw new Error("the fake store knows transfers only");
      for (const leg of command.legs) {
        // A locked read caches what it read, as money-load.ts does.
        const row = this.rows.get(leg.entityId)!;
        this.cache.remember(row);
        entities.set(row.id, entityState(row));
      }
    }
    const book = new Book({
      entities,
      groups: new Map(),
      reservations: new Map(),
      captures: new Map(),
      externalIdFor: () => undefined,
      now: new Date(),
    });
    return { book, unitDone: () => {}, write: () => this.write(tx, book) };
  }

  posted(id: string): bigint {
    return this.rows.get(id)!.posted;
  }

  private write(tx: unknown, book: Book, chain?: WriteChain): Promise<void> {
    (tx as FakeTx).books.push(book);
    if (chain) {
      (tx as FakeTx).chained = true;
      // As money.ts does once the rows are locked: the rows the write leaves, cached under the transaction's id.
      void Promise.resolve().then(() => {
        for (const state of book.effects().changedEntities)
          this.cache.remember(Object.assign({}, state.row, { posted: state.posted, version: (tx as FakeTx).id }));
        chain.cached();
      });
    }
    return Promise.resolve();
  }

  private async run<T>(work: TransactionWork<T>): Promise<T> {
    const tx: FakeTx = { id: String(++this.lastId), chained: false, books: [], completed: [], refused: [], inserted: [] };
    const writes = sentWrites();
    const result = await work(tx as unknown as Tx, writes);
    await Promise.all(writes);
    if (this.gate) await this.gate;
    const failure = this.failures.shift();
    if (failure) throw failure;
    this.commit(tx);
    return result;
  }

  private commit(tx: FakeTx): void {
    for (const row of tx.books.flatMap((book) => book.rows())) {
      if (this.rows.get(row.id)!.version !== row.version) throw databaseError("40001");
    }
    for (const key of tx.inserted) {
      if (this.storedKeys.has(keyString(key)))
        throw databaseError("23505", { table_name: "idempotency_keys", constraint_name: "idempotency_keys_pkey" });
    }
    for (const state of tx.books.flatMap((book) => book.effects().changedEntities)) {
      const row = Object.assign({}, state.row, { posted: state.posted, version: tx.id });
      this.rows.set(row.id, row);
      if (!tx.chained) this.cache.remember(row);
    }
    for (const key of tx.inserted) this.storedKeys.set(keyString(key), { fingerprint: key.fingerprint, response: key.response });
    for (const key of tx.completed) this.storedKeys.get(keyString(key))!.response = key.response;
    for (const key of tx.refused) this.storedKeys.delete(keyString(key));
  }
}

const accountsOf = (commands: MoneyCommand[]) => [...new Set(commands.map((c) => c.accountId))];
const names = (commands: MoneyCommand[]) => commands.map((c) => (c.kind === "create" ? c.description : c.kind)).join(",");

const entity = (id: string, posted: bigint, account = ACCOUNT): BookEntity => ({
  id,
  account_id: account,
  program_id: PROGRAM,
  currency_code: "USD",
  is_external: false,
  status: "active",
  overdraft_limit: 0n,
  posted,
  pending_debits: 0n,
  pending_credits: 0n,
  held: 0n,
  version: "1",
});

/** A posted transfer named `name` (its description), answered with the group's id. */
function transfer(
  name: string,
  from: string,
  to: string,
  amount: bigint,
  key?: string,
  account = ACCOUNT,
): Submission<typeof StringValueSchema> {
  const command: MoneyCommand = {
    kind: "create",
    accountId: account,
    programId: PROGRAM,
    requestId: `req_${name}`,
    traceparent: "",
    description: name,
    metadata: null,
    status: "posted",
    legs: [
      { entityId: from, direction: "debit", amount },
      { entityId: to, direction: "credit", amount },
    ],
  };
  return {
    command,
    responseSchema: StringValueSchema,
    respond: (outcome) => ({ value: outcome.group!.id }),
    ...(key ? { idempotency: { accountId: account, key, fingerprint: Buffer.from(`fingerprint of ${key}`) } } : {}),
  };
}

/**
 * LEDGER_BATCH_ONE_ACCOUNT unless a test says: the partitioned run sets it, so every test here runs
 * both with it and without it (their commands are of one account).
 */
const ONE_ACCOUNT_FROM_ENV = process.env["LEDGER_BATCH_ONE_ACCOUNT"] === "true";

function batcherOn(
  store: FakeStore,
  settings: { maxBatch?: number; maxInFlight?: number; lingerMs?: number; oneAccount?: boolean; chained?: boolean } = {},
) {
  return createBatcher({
    store,
    outbox: { wake: () => {} },
    log: createLogger("batch-paths-test", "silent"),
    maxBatch: settings.maxBatch ?? 100,
    maxInFlight: settings.maxInFlight ?? 4,
    lingerMs: settings.lingerMs ?? 10,
    oneAccountPerTransaction: settings.oneAccount ?? ONE_ACCOUNT_FROM_ENV,
    chainedWrites: settings.chained ?? false,
  });
}

/** The end of the event loop's current turn, when the scheduler looks at its queue. */
const turn = () => new Promise((resolve) => setImmediate(resolve));

/** The batch metrics, so far. */
async function counts(): Promise<Record<string, number>> {
  const read = async (name: string) => (await (metricsRegistry.getSingleMetric(name) as Counter).get()).values;
  const result: Record<string, number> = {};
  for (const { labels, value } of await read("ledger_batch_paths_total")) result[String(labels["path"])] = value;
  result["waits"] = (await read("ledger_batch_waits_total"))[0]?.value ?? 0;
  result["fallbacks"] = (await read("ledger_batch_fallbacks_total"))[0]?.value ?? 0;
  return result;
}

/** What the batch metrics counted since `before`, leaving out what stayed at zero. */
async function countedSince(before: Record<string, number>): Promise<Record<string, number>> {
  const now = await counts();
  return Object.fromEntries(Object.entries(now).flatMap(([k, v]) => (v - (before[k] ?? 0) === 0 ? [] : [[k, v - (before[k] ?? 0)]])));
}

const failureOf = (p: Promise<unknown>) =>
  p.then(
    () => undefined,
    (err: unknown) => err,
  );

beforeEach(() => {
  // The linger's clock: performance.now() and its timer move only when the test says.
  vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "performance"] });
});
afterEach(() => {
  vi.useRealTimers();
});

describe("when a batch starts", () => {
  it("starts a lone request at the end of its turn, with every request of that turn, without lingering", async () => {
    const store = new FakeStore([entity("a", 100n), entity("b", 0n), entity("c", 100n), entity("d", 0n)], true);
    const batcher = batcherOn(store, { lingerMs: 10_000 });
    const lone = batcher.submit(transfer("lone", "a", "b", 10n));
    await Promise.resolve();
    expect(store.opened).toEqual([]);
    await turn();
    expect(store.opened).toEqual(["cached lone"]);
    await lone;

    const together = [batcher.submit(transfer("one", "a", "b", 1n)), batcher.submit(transfer("two", "c", "d", 2n))];
    await turn();
    expect(store.opened).toEqual(["cached lone", "cached one,two"]);
    await Promise.all(together);
    expect([store.posted("a"), store.posted("b"), store.posted("c"), store.posted("d")]).toEqual([89n, 11n, 98n, 2n]);
  });

  it("while a batch is in flight, lingers lingerMs for company, and starts at once when maxBatch commands are queued", async () => {
    const rows = ["a", "b", "c", "d", "e", "f"].flatMap((id) => [entity(id, 100n), entity(`${id}2`, 0n)]);
    const store = new FakeStore(rows, true);
    const batcher = batcherOn(store, { maxBatch: 3, maxInFlight: 3, lingerMs: 20 });
    const send = (id: string) => batcher.submit(transfer(id, id, `${id}2`, 1n));
    const release = store.pause();
    const answers = [send("a")];
    await turn();
    expect(store.opened).toEqual(["cached a"]);

    answers.push(send("b"));
    await turn();
    answers.push(send("c"));
    await turn();
    vi.advanceTimersByTime(19);
    await turn();
    expect(store.opened).toEqual(["cached a"]);
    vi.advanceTimersByTime(1);
    await turn();
    expect(store.opened).toEqual(["cached a", "cached b,c"]);

    // Three queued make a whole batch: it does not wait for the linger.
    answers.push(send("d"), send("e"), send("f"));
    await turn();
    expect(store.opened).toEqual(["cached a", "cached b,c", "cached d,e,f"]);
    release();
    await Promise.all(answers);
    expect(rows.filter((r) => r.id.endsWith("2")).map((r) => store.posted(r.id))).toEqual([1n, 1n, 1n, 1n, 1n, 1n]);
  });
});

describe("which way a batch goes", () => {
  it("makes a batch started in the same turn as another on the same cached rows wait for it, and write on the rows it left", async () => {
    // Two transactions of one command each, both started in the scheduler's one look at its queue.
    const store = new FakeStore([entity("a", 100n), entity("b", 0n)], true);
    const batcher = batcherOn(store, { maxBatch: 1, maxInFlight: 2, lingerMs: 0 });
    const before = await counts();
    const answers = [batcher.submit(transfer("first", "a", "b", 10n)), batcher.submit(transfer("second", "a", "b", 20n))];
    await turn();
    await Promise.all(answers);
    // Had both taken the same cached versions, the second would be refused as stale and read again under lock.
    expect(store.opened).toEqual(["cached first", "cached second"]);
    expect(await countedSince(before)).toEqual({ cached: 2, waits: 1 });
    expect([store.posted("a"), store.posted("b")]).toEqual([70n, 30n]);
  });

  it("with chained writes, builds a batch on the rows one in flight leaves before that one commits, and commits both", async () => {
    const store = new FakeStore([entity("a", 100n), entity("b", 0n)], true);
    const batcher = batcherOn(store, { maxBatch: 1, maxInFlight: 2, lingerMs: 0, chained: true });
    const before = await counts();
    const open = store.pause();
    const answers = [batcher.submit(transfer("first", "a", "b", 10n)), batcher.submit(transfer("second", "a", "b", 20n))];
    await turn();
    // Both books are open while every commit is held: the second rests on what the first leaves.
    expect(store.opened).toEqual(["cached first", "cached second"]);
    expect(store.cache.row("a")!.posted).toBe(70n);
    expect(store.posted("a")).toBe(100n);
    open();
    await Promise.all(answers);
    expect(await countedSince(before)).toEqual({ chained: 2, waits: 1 });
    expect([store.posted("a"), store.posted("b")]).toEqual([70n, 30n]);
  });

  it("without chained writes, builds the second book only once the first batch committed", async () => {
    const store = new FakeStore([entity("a", 100n), entity("b", 0n)], true);
    const batcher = batcherOn(store, { maxBatch: 1, maxInFlight: 2, lingerMs: 0, chained: false });
    const open = store.pause();
    const answers = [batcher.submit(transfer("first", "a", "b", 10n)), batcher.submit(transfer("second", "a", "b", 20n))];
    await turn();
    expect(store.opened).toEqual(["cached first"]);
    open();
    await Promise.all(answers);
    expect(store.opened).toEqual(["cached first", "cached second"]);
    expect([store.posted("a"), store.posted("b")]).toEqual([70n, 30n]);
  });

  it("applies the units one by one when Postgres refused their shared transaction", async () => {
    const store = new FakeStore([entity("a", 100n), entity("b", 0n), entity("c", 100n), entity("d", 0n)], false);
    const batcher = batcherOn(store);
    const before = await counts();
    store.failures.push(new TransactionRolledBack());
    const answers = [batcher.submit(transfer("one", "a", "b", 10n)), batcher.submit(transfer("two", "c", "d", 20n))];
    await turn();
    const [one, two] = await Promise.all(answers);
    expect([one!.response.value, two!.response.value].every((id) => id.startsWith("trx-grp_"))).toBe(true);
    // The refused transaction wrote nothing; its read left the rows cached, so each unit then goes the cached way.
    expect(store.opened).toEqual(["locked one,two", "cached one", "cached two"]);
    expect(await countedSince(before)).toEqual({ locked: 1, cached: 2, fallbacks: 1 });
    expect([store.posted("a"), store.posted("b"), store.posted("c"), store.posted("d")]).toEqual([90n, 10n, 80n, 20n]);
  });

  it("answers each unit with the error, retrying none, when the connection was lost and the transaction may have committed", async () => {
    const store = new FakeStore([entity("a", 100n), entity("b", 0n), entity("c", 100n), entity("d", 0n)], false);
    const batcher = batcherOn(store);
    const before = await counts();
    const lost = new Error("write CONNECTION_CLOSED 127.0.0.1:5432");
    store.failures.push(lost);
    const failures = [failureOf(batcher.submit(transfer("one", "a", "b", 10n))), failureOf(batcher.submit(transfer("two", "c", "d", 20n)))];
    await turn();
    expect(await Promise.all(failures)).toEqual([lost, lost]);
    expect(store.opened).toEqual(["locked one,two"]);
    expect(await countedSince(before)).toEqual({ locked: 1 });

    // A lone unit is not retried either, even when Postgres refused it: it has no neighbour to spare.
    const refused = new TransactionRolledBack();
    store.failures.push(refused);
    const alone = failureOf(batcher.submit(transfer("three", "a", "b", 5n)));
    await turn();
    expect(await alone).toBe(refused);
    expect(store.opened).toEqual(["locked one,two", "cached three"]);
    expect([store.posted("a"), store.posted("c")]).toEqual([100n, 100n]);
  });

  it("applies a keyed command refused on the cached path the locked way, which replays its key's earlier success", async () => {
    // The first call with the key took 95 of a's 100; the cache has a's rows as that left them.
    const store = new FakeStore([entity("a", 5n), entity("b", 95n)], true);
    const earlier = toBinary(StringValueSchema, create(StringValueSchema, { value: "trx-grp_earlier" }));
    const retry = transfer("retry", "a", "b", 95n, "pay-once");
    store.storedKeys.set(keyString(retry.idempotency!), { fingerprint: retry.idempotency!.fingerprint, response: earlier });
    const batcher = batcherOn(store);
    const before = await counts();
    const answer = batcher.submit(retry);
    await turn();
    expect(await answer).toMatchObject({ response: { value: "trx-grp_earlier" }, replayed: true });
    expect(store.opened).toEqual(["cached retry", "locked retry"]);
    expect(await countedSince(before)).toEqual({ keyed_refusal: 1, locked: 1 });
    expect([store.posted("a"), store.posted("b")]).toEqual([5n, 95n]);

    // Without an earlier success the locked way refuses it too, and frees the key.
    const fresh = transfer("fresh", "a", "b", 95n, "never-used");
    const refused = failureOf(batcher.submit(fresh));
    await turn();
    expect(ConnectError.from(await refused).rawMessage).toBe("entity a has 5 available; 95 is required");
    expect(store.storedKeys.has(keyString(fresh.idempotency!))).toBe(false);
  });
});

describe("one account per transaction (LEDGER_BATCH_ONE_ACCOUNT)", () => {
  const ACCOUNTS = ["acct_1", "acct_2", "acct_3"];
  /** Rows of three accounts, a payer and a payee each, and 12 transfers between them, the accounts interleaved. */
  const setUp = (cached: boolean) => {
    const store = new FakeStore(
      ACCOUNTS.flatMap((account) => [entity(`${account}_from`, 100n, account), entity(`${account}_to`, 0n, account)]),
      cached,
    );
    const transfers = Array.from({ length: 12 }, (_, i) => {
      const account = ACCOUNTS[i % 3]!;
      return transfer(`t${i}`, `${account}_from`, `${account}_to`, 1n, undefined, account);
    });
    return { store, transfers };
  };

  for (const cached of [true, false]) {
    it(`keeps each transaction to one account's commands, the accounts' transactions side by side (${cached ? "cached" : "locked"} rows)`, async () => {
      const { store, transfers } = setUp(cached);
      // No linger: while one transaction is in flight the next waits lingerMs for company, for any account.
      const batcher = batcherOn(store, { maxBatch: 100, maxInFlight: 4, lingerMs: 0, oneAccount: true });
      const release = store.pause();
      const answers = transfers.map((t) => batcher.submit(t));
      await turn();
      // All three started in the scheduler's one look at the queue, none waiting for another's commit.
      expect(store.accounts).toEqual([["acct_1"], ["acct_2"], ["acct_3"]]);
      expect(store.opened.map((o) => o.replace(/^\w+ /, ""))).toEqual(["t0,t3,t6,t9", "t1,t4,t7,t10", "t2,t5,t8,t11"]);
      release();
      expect((await Promise.all(answers)).every((a) => a.response.value.startsWith("trx-grp_"))).toBe(true);
      for (const account of ACCOUNTS) expect([store.posted(`${account}_from`), store.posted(`${account}_to`)]).toEqual([96n, 4n]);
    });
  }

  it("mixes the accounts in one transaction when it is off (what the setting prevents)", async () => {
    const { store, transfers } = setUp(true);
    const batcher = batcherOn(store, { maxBatch: 100, maxInFlight: 4, oneAccount: false });
    const answers = transfers.map((t) => batcher.submit(t));
    await turn();
    await Promise.all(answers);
    expect(store.accounts).toEqual([ACCOUNTS]);
  });

  it("never puts two accounts in one transaction, whatever the arrival order, batch size and concurrency", async () => {
    for (const [maxBatch, maxInFlight] of [
      [1, 1],
      [2, 1],
      [5, 2],
      [100, 4],
    ] as const) {
      const { store } = setUp(true);
      const batcher = batcherOn(store, { maxBatch, maxInFlight, lingerMs: 0, oneAccount: true });
      // A fixed shuffle of 30 transfers, sent over three turns.
      const order = Array.from({ length: 30 }, (_, i) => (i * 7) % 30);
      const answers: Promise<unknown>[] = [];
      for (const [n, i] of order.entries()) {
        const account = ACCOUNTS[i % 3]!;
        answers.push(batcher.submit(transfer(`s${i}`, `${account}_from`, `${account}_to`, 1n, undefined, account)));
        if (n % 10 === 9) await turn();
      }
      await Promise.all(answers);
      expect(store.accounts.every((accounts) => accounts.length === 1)).toBe(true);
      expect(store.accounts.length).toBeGreaterThanOrEqual(3);
      for (const account of ACCOUNTS) expect(store.posted(`${account}_to`)).toBe(10n);
    }
  });

  it("keeps a batch call whole in one transaction, and two accounts' batch calls apart", async () => {
    const { store } = setUp(true);
    const batcher = batcherOn(store, { maxBatch: 100, maxInFlight: 4, oneAccount: true });
    const batchOf = (account: string, n: number) =>
      batcher.submitBatch({
        items: Array.from({ length: n }, (_, i) =>
          transfer(`${account}_b${i}`, `${account}_from`, `${account}_to`, 2n, undefined, account),
        ) as unknown as Array<Submission<DescMessage>>,
        atomic: false,
        responseSchema: StringValueSchema,
        respond: (answers) => ({ value: String(answers.length) }),
      });
    const answers = [batchOf("acct_1", 5), batchOf("acct_2", 3), batchOf("acct_1", 2)];
    await turn();
    expect((await Promise.all(answers)).map((a) => a.response.value)).toEqual(["5", "3", "2"]);
    // acct_1's two calls may share a transaction; acct_2's goes alone; no call is split.
    expect(store.accounts).toEqual([["acct_1"], ["acct_2"]]);
    expect(store.opened.map((o) => o.split(",").length)).toEqual([7, 3]);
  });
});
