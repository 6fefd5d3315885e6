import { ConnectError } from "@connectrpc/connect";
import { eventSubject, sqlState } from "@ledger/common";
import { ledgerViolations, startStack, type Stack } from "@ledger/e2e";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { postgresBatchStore } from "./batch-store.js";
import { readLedgerConfig } from "./config.js";
import { BOOK_ENTITY_COLUMNS, type CachedOpenBook, EntityCache, type MoneyCommand, openCachedBook } from "./money.js";
import type { BookEntity } from "./money-rules.js";

// Cached balances (docs/architecture.md#cached-balances): a batch of transfers between entities
// the process knows is applied on its cached rows and written in one statement that checks every
// row is still the version it cached. Here two ledger processes share one database, so each one's
// cache goes stale behind its back, and every answer must still be the one the current balances give.

let stack: Stack;
beforeAll(async () => {
  stack = await startStack();
});
afterAll(async () => stack?.close());

/**
 * Batches by path (cached, locked, stale), and batches that failed as a whole (a deadlock, say),
 * so far, summed over the ledgers of this test process.
 */
async function paths(): Promise<Record<string, number>> {
  const text = await (await fetch(`${stack.ledgerUrl}/metrics`)).text();
  const counts: Record<string, number> = { cached: 0, chained: 0, locked: 0, stale: 0, known_key: 0 };
  for (const m of text.matchAll(/^ledger_batch_paths_total\{path="(\w+)"\} (\d+)$/gm)) counts[m[1]!] = Number(m[2]);
  counts["failed"] = Number(/^ledger_batch_fallbacks_total (\d+)$/m.exec(text)?.[1] ?? 0);
  counts["waits"] = Number(/^ledger_batch_waits_total (\d+)$/m.exec(text)?.[1] ?? 0);
  return counts;
}

/** How many database sessions wait for a lock the session `pid` holds. */
async function waitingOn(pid: number): Promise<number> {
  const [row] = await stack.sql<{ n: number }[]>`
    select count(*)::int as n from pg_stat_activity where ${pid}::int = any(pg_blocking_pids(pid))`;
  return row!.n;
}

async function since(before: Record<string, number>): Promise<Record<string, number>> {
  const now = await paths();
  return Object.fromEntries(Object.keys(now).map((k) => [k, now[k]! - (before[k] ?? 0)]));
}

describe("two ledger processes on one database", () => {
  it("refuses on the balance another process left, not on the one it cached, and pays from money another process moved in", async () => {
    const replica = await stack.startLedgerReplica();
    const one = stack.ledgerClient(stack.account.api_key);
    const two = stack.ledgerClient(stack.account.api_key, replica.server.url);
    const entity = async () => (await one.createEntity({ entityName: "c", entityType: "wallet" })).entity!.entityId;
    const [a, b, c] = await Promise.all([entity(), entity(), entity()]);
    const transfer = (client: typeof one, from: string, to: string, amount: bigint) =>
      client.createTransaction({
        description: "cached",
        status: 2,
        form: { case: "transfer", value: { fromEntityId: from, toEntityId: to, amount } },
      });
    const posted = async (id: string) => (await one.getEntity({ entityId: id })).entity!.balances!.posted;

    await one.fundEntity({ entityId: a, amount: 100n });
    await transfer(one, a, b, 10n); // process one now has a and b cached
    let before = await paths();
    await transfer(one, a, b, 10n);
    expect((await since(before)).cached).toBe(1);

    // Process two spends most of a; process one's cache still says 80 is there.
    await transfer(two, a, c, 70n);
    before = await paths();
    const refused = await transfer(one, a, b, 50n).catch((err: unknown) => ConnectError.from(err));
    expect(refused).toBeInstanceOf(ConnectError);
    expect((refused as ConnectError).rawMessage).toBe(`entity ${a} has 10 available; 50 is required`);
    const refusal = await since(before);
    expect(refusal.stale).toBe(1);
    expect(refusal.locked).toBe(1);
    expect(await posted(a)).toBe(10n);

    // Process two pays 60 into b; process one's cache says b holds 20, and 70 must go through.
    await transfer(two, c, b, 60n);
    await transfer(one, b, a, 70n);
    expect([await posted(a), await posted(b), await posted(c)]).toEqual([80n, 10n, 10n]);
    expect(await ledgerViolations(stack.sql, stack.account.account_id)).toEqual([]);
    await replica.close();
  });

  it("keeps every cent when both transfer between the same few entities at once", async () => {
    const replica = await stack.startLedgerReplica();
    const clients = [stack.ledgerClient(stack.account.api_key), stack.ledgerClient(stack.account.api_key, replica.server.url)];
    const ids: string[] = [];
    for (let i = 0; i < 6; i++) {
      const id = (await clients[0]!.createEntity({ entityName: `hot ${i}`, entityType: "wallet" })).entity!.entityId;
      await clients[0]!.fundEntity({ entityId: id, amount: 1_000n });
      ids.push(id);
    }
    // Both processes learn every entity before the race.
    for (const client of clients) for (const id of ids) await client.fundEntity({ entityId: id, amount: 1n });
    const before = await paths();

    // A fixed pseudo-random schedule, so a failure can be replayed.
    let seed = 42;
    const next = (n: number) => {
      // mulberry32
      seed = (seed + 0x6d2b79f5) | 0;
      let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
      t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
      return Math.floor((((t ^ (t >>> 14)) >>> 0) / 2 ** 32) * n);
    };
    // Mostly transfers; deposits and withdrawals too, which also write the program's external entity.
    const plan = Array.from({ length: 600 }, (_, i) => {
      const roll = next(100);
      const kind = roll < 70 ? ("transfer" as const) : roll < 85 ? ("deposit" as const) : ("withdrawal" as const);
      const from = next(ids.length);
      const to = (from + 1 + next(ids.length - 1)) % ids.length;
      return { kind, client: clients[i % 2]!, from: ids[from]!, to: ids[to]!, amount: BigInt(1 + next(400)) };
    });
    const call = (t: (typeof plan)[number]) => {
      if (t.kind === "deposit") return t.client.fundEntity({ entityId: t.to, amount: t.amount });
      if (t.kind === "withdrawal") return t.client.defundEntity({ entityId: t.from, amount: t.amount });
      return t.client.createTransaction({
        description: "race",
        status: 2,
        form: { case: "transfer", value: { fromEntityId: t.from, toEntityId: t.to, amount: t.amount } },
      });
    };
    const send = (t: (typeof plan)[number]) =>
      call(t).then(
        () => "ok" as const,
        (err: unknown) => {
          if (!ConnectError.from(err).rawMessage.includes("available")) throw err;
          return "insufficient" as const;
        },
      );
    // In rounds of 20 (10 a process), so that each round is about one batch a process: cached
    // batches of the two race each other, and the loser finds its rows changed.
    const outcomes: Array<"ok" | "insufficient"> = [];
    for (let i = 0; i < plan.length; i += 20) outcomes.push(...(await Promise.all(plan.slice(i, i + 20).map(send))));

    // Each balance is exactly what the accepted calls make of it, and none went below zero.
    const expected = new Map(ids.map((id) => [id, 1_002n]));
    const add = (id: string, amount: bigint) => expected.set(id, expected.get(id)! + amount);
    plan.forEach((t, i) => {
      if (outcomes[i] !== "ok") return;
      if (t.kind !== "deposit") add(t.from, -t.amount);
      if (t.kind !== "withdrawal") add(t.to, t.amount);
    });
    const rows = await stack.sql<{ id: string; posted: bigint }[]>`select id, posted from entities where id = any(${ids})`;
    expect(new Map(rows.map((r) => [r.id, r.posted]))).toEqual(expected);
    expect(rows.every((r) => r.posted >= 0n)).toBe(true);
    expect(outcomes.filter((o) => o === "ok").length).toBeGreaterThan(300);

    expect(await ledgerViolations(stack.sql, stack.account.account_id)).toEqual([]);

    // Both paths ran, and the caches did go stale under each other. No batch failed as a whole:
    // every transaction takes entity locks in one order (ordinary by id, then external), whichever
    // way it got its rows, so none is ever a deadlock's victim.
    const run = await since(before);
    console.log("RUN", JSON.stringify(run));
    expect(run.cached).toBeGreaterThan(0);
    expect(run.stale).toBeGreaterThan(0);
    expect(run.failed).toBe(0);
    await replica.close();
  });
});

describe("batches of one process on the same entities", () => {
  it("waits for the batch writing its rows and pays from what that one left, never from the balance before", async () => {
    const client = stack.ledgerClient(stack.account.api_key);
    const entity = async (name: string) => (await client.createEntity({ entityName: name, entityType: "wallet" })).entity!.entityId;
    const [payer, payee] = [await entity("payer"), await entity("payee")];
    // Funding reads both under lock; from then on the process has them cached.
    await client.fundEntity({ entityId: payer, amount: 100n });
    await client.fundEntity({ entityId: payee, amount: 2n });
    const before = await paths();

    // 120 calls of 5 at once: more than one transaction takes them (above 32 outstanding, one
    // takes half), and every one of those names the same two rows, so each after the first has
    // to wait for the one before it. Exactly 20 fit in the 100 the payer holds.
    const outcomes = await Promise.all(
      Array.from({ length: 120 }, () =>
        client
          .createTransaction({
            description: "chain",
            status: 2,
            form: { case: "transfer", value: { fromEntityId: payer, toEntityId: payee, amount: 5n } },
          })
          .then(
            () => "ok",
            (err: unknown) => {
              if (!ConnectError.from(err).rawMessage.includes("available")) throw err;
              return "insufficient";
            },
          ),
      ),
    );
    expect(outcomes.filter((o) => o === "ok").length).toBe(20);
    const posted = async (id: string) => (await client.getEntity({ entityId: id })).entity!.balances!.posted;
    expect([await posted(payer), await posted(payee)]).toEqual([0n, 102n]);
    expect(await ledgerViolations(stack.sql, stack.account.account_id)).toEqual([]);

    // The later transactions went the cached way on the rows the earlier ones wrote: none read
    // under lock, and none rested on a version another had already replaced. Chained writes are on
    // in the test stacks, so one went in while another was in flight, having waited (if it
    // started beside that one) only until that one held the rows, not until it committed.
    const run = await since(before);
    expect(run.cached! + run.chained!).toBeGreaterThan(1);
    expect([run.locked, run.stale, run.failed]).toEqual([0, 0, 0]);
  });

  it("chains batch calls on the same rows one behind another, and keeps every cent and every refusal", async () => {
    const client = stack.ledgerClient(stack.account.api_key);
    const entity = async (name: string) => (await client.createEntity({ entityName: name, entityType: "wallet" })).entity!.entityId;
    const payer = await entity("chained payer");
    const payees = await Promise.all([1, 2, 3, 4].map((n) => entity(`chained payee ${n}`)));
    await client.fundEntity({ entityId: payer, amount: 1_000n });
    for (const payee of payees) await client.fundEntity({ entityId: payee, amount: 1n });
    const before = await paths();

    // 40 calls of 50 transfers of 1 at once, 2,000 asked of the 1,000 the payer holds: the
    // transactions in flight all name the payer, so each rests on the one before it.
    const calls = await Promise.all(
      Array.from({ length: 40 }, (_, call) =>
        client.createTransactions({
          transactions: Array.from({ length: 50 }, (_, i) => ({
            transaction: {
              description: "chained",
              status: 2,
              form: { case: "transfer" as const, value: { fromEntityId: payer, toEntityId: payees[(call + i) % 4]!, amount: 1n } },
            },
          })),
        }),
      ),
    );
    expect(calls.reduce((n, c) => n + c.succeeded, 0)).toBe(1_000);
    const refusals = calls.flatMap((c) => c.results.flatMap((r) => (r.result.case === "error" ? [r.result.value.code] : [])));
    expect(refusals.length).toBe(1_000);
    expect(new Set(refusals)).toEqual(new Set(["insufficient_funds"]));
    const posted = async (id: string) => (await client.getEntity({ entityId: id })).entity!.balances!.posted;
    expect(await posted(payer)).toBe(0n);
    expect((await Promise.all(payees.map(posted))).reduce((a, b) => a + b, 0n)).toBe(1_004n);
    expect(await ledgerViolations(stack.sql, stack.account.account_id)).toEqual([]);

    const run = await since(before);
    expect(run.chained).toBeGreaterThan(0);
    expect([run.locked, run.stale, run.failed]).toEqual([0, 0, 0]);
  });
});

describe("LEDGER_ENTITY_CACHE_SIZE", () => {
  it("reads every batch under lock when it is 0", async () => {
    const replica = await stack.startLedgerReplica({ entityCacheSize: 0 });
    const client = stack.ledgerClient(stack.account.api_key, replica.server.url);
    const entity = async () => (await client.createEntity({ entityName: "uncached", entityType: "wallet" })).entity!.entityId;
    const [a, b] = [await entity(), await entity()];
    await client.fundEntity({ entityId: a, amount: 100n });
    const before = await paths();
    for (let i = 0; i < 3; i++) {
      await client.createTransaction({
        description: "uncached",
        status: 2,
        form: { case: "transfer", value: { fromEntityId: a, toEntityId: b, amount: 10n } },
      });
    }
    const run = await since(before);
    console.log("RUN", JSON.stringify(run));
    expect([run.cached, run.locked]).toEqual([0, 3]);
    expect((await client.getEntity({ entityId: b })).entity!.balances!.posted).toBe(30n);
    await replica.close();
  });

  it("defaults to 10,000 and refuses what is not a count from 0 to 1,000,000", () => {
    expect(readLedgerConfig({}).entityCacheSize).toBe(10_000);
    expect(readLedgerConfig({ LEDGER_ENTITY_CACHE_SIZE: "0" }).entityCacheSize).toBe(0);
    expect(() => readLedgerConfig({ LEDGER_ENTITY_CACHE_SIZE: "1000001" })).toThrow(/LEDGER_ENTITY_CACHE_SIZE/);
    expect(() => readLedgerConfig({ LEDGER_ENTITY_CACHE_SIZE: "many" })).toThrow(/LEDGER_ENTITY_CACHE_SIZE/);
  });
});

describe("idempotency keys on the cached path", () => {
  it("stores a keyed transfer's answer in its one round trip, replays a repeat, and refuses the key for another request", async () => {
    const client = stack.ledgerClient(stack.account.api_key);
    const entity = async () => (await client.createEntity({ entityName: "k", entityType: "wallet" })).entity!.entityId;
    const [a, b] = await Promise.all([entity(), entity()]);
    await client.fundEntity({ entityId: a, amount: 100n });
    const keyed = (key: string, amount: bigint) => {
      let replayed = false;
      return client
        .createTransaction(
          { description: "keyed", status: 2, form: { case: "transfer", value: { fromEntityId: a, toEntityId: b, amount } } },
          { headers: { "idempotency-key": key }, onHeader: (h) => (replayed = h.get("idempotent-replayed") === "true") },
        )
        .then((res) => ({ group: res.transactionGroup!.transactionGroupId, replayed }));
    };
    const key = `cached-${Date.now()}`;
    // One transfer without a key, so the process has both entities cached.
    await client.createTransaction({
      description: "warm",
      status: 2,
      form: { case: "transfer", value: { fromEntityId: a, toEntityId: b, amount: 1n } },
    });

    let before = await paths();
    const first = await keyed(key, 10n);
    expect(first.replayed).toBe(false);
    expect((await since(before)).cached).toBe(1);

    before = await paths();
    const again = await keyed(key, 10n);
    expect(again).toEqual({ group: first.group, replayed: true });
    const repeat = await since(before);
    expect([repeat.known_key, repeat.locked]).toEqual([1, 1]);

    const other = await keyed(key, 20n).catch((err: unknown) => ConnectError.from(err));
    expect(other).toBeInstanceOf(ConnectError);
    expect((other as ConnectError).rawMessage).toContain("already used with a different request");

    // Ten at once with one new key: one transfer, ten answers naming it.
    const key2 = `${key}-burst`;
    const burst = await Promise.all(Array.from({ length: 10 }, () => keyed(key2, 5n)));
    expect(new Set(burst.map((r) => r.group)).size).toBe(1);
    expect(burst.filter((r) => !r.replayed)).toHaveLength(1);
    const [row] = await stack.sql<{ posted: bigint }[]>`select posted from entities where id = ${a}`;
    expect(row!.posted).toBe(84n);
    expect(await ledgerViolations(stack.sql, stack.account.account_id)).toEqual([]);
  });
});

describe("the write's version check", () => {
  async function setUp() {
    const client = stack.ledgerClient(stack.account.api_key);
    const entity = async () => (await client.createEntity({ entityName: "v", entityType: "wallet" })).entity!.entityId;
    const [a, b] = await Promise.all([entity(), entity()]);
    await client.fundEntity({ entityId: a, amount: 100n });
    const rows = await stack.sql<BookEntity[]>`
      select ${stack.sql.unsafe(BOOK_ENTITY_COLUMNS)} from entities
      where id in (${a}, ${b}) or (program_id = ${stack.account.program_id} and is_external)`;
    const command: MoneyCommand = {
      kind: "create",
      accountId: stack.account.account_id,
      programId: stack.account.program_id,
      requestId: "req_cached",
      traceparent: "",
      description: "cached",
      metadata: null,
      status: "posted",
      legs: [
        { entityId: a, direction: "debit", amount: 30n },
        { entityId: b, direction: "credit", amount: 30n },
      ],
    };
    const groups = async () => (await stack.sql<{ n: number }[]>`select count(*)::int as n from legs where entity_id = ${a}`)[0]!.n;
    return { a, b, rows, command, groups };
  }

  // The stack's own subjects: its relay publishes what these writes put in the outbox.
  const subjectOf = (type: string) => eventSubject(stack.subjectPrefix, type);

  it("writes nothing when a cached row is not the version in the database", async () => {
    const { a, rows, command, groups } = await setUp();
    const cache = new EntityCache(10);
    // The version a rolled-back transaction would have left in the cache: no row has it.
    for (const row of rows) cache.remember(row.id === a ? Object.assign({}, row, { version: "3" }) : row);
    const legsBefore = await groups();
    const open = openCachedBook([command], cache, subjectOf) as CachedOpenBook;
    expect(open.book.apply(command).ok).toBe(true);
    const failure = await open.writeOn(stack.sql).then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(sqlState(failure)).toBe("40001");
    expect(await groups()).toBe(legsBefore);
    const [row] = await stack.sql<{ posted: bigint }[]>`select posted from entities where id = ${a}`;
    expect(row!.posted).toBe(100n);
  });

  it("writes when every cached row is current, and caches the versions it wrote", async () => {
    const { a, b, rows, command, groups } = await setUp();
    const cache = new EntityCache(10);
    for (const row of rows) cache.remember(row);
    const legsBefore = await groups();
    const open = openCachedBook([command], cache, subjectOf) as CachedOpenBook;
    expect(open.book.apply(command).ok).toBe(true);
    await open.writeOn(stack.sql);
    expect(await groups()).toBe(legsBefore + 1);
    const now = await stack.sql<
      BookEntity[]
    >`select ${stack.sql.unsafe(BOOK_ENTITY_COLUMNS)} from entities where id in (${a}, ${b}) order by id`;
    for (const row of now) expect(cache.row(row.id)).toEqual(row);
    expect(now.find((r) => r.id === a)!.posted).toBe(70n);
    expect(await ledgerViolations(stack.sql, stack.account.account_id)).toEqual([]);
  });
  it("locks the ordinary entities it read before the external one, as a locked read does", async () => {
    const { a, rows } = await setUp();
    const cache = new EntityCache(10);
    for (const row of rows) cache.remember(row);
    const external = rows.find((r) => r.is_external)!;
    const deposit: MoneyCommand = {
      kind: "fund",
      accountId: stack.account.account_id,
      programId: stack.account.program_id,
      requestId: "req_lock_order",
      traceparent: "",
      entityId: a,
      amount: 5n,
      description: "lock order",
    };
    // Another transaction holds the entity, as a batch that read it under lock does.
    const holder = await stack.sql.reserve();
    try {
      await holder`begin`;
      const [{ pid }] = (await holder`select pg_backend_pid() as pid`) as unknown as [{ pid: number }];
      await holder`select id from entities where id = ${a} for update`;
      const open = openCachedBook([deposit], cache, subjectOf) as CachedOpenBook;
      expect(open.book.apply(deposit).ok).toBe(true);
      const written = open.writeOn(stack.sql);
      await expect.poll(() => waitingOn(pid)).toBe(1);
      // The waiting write has not taken the external entity: the holder could still write it.
      const free = await stack.sql`select id from entities where id = ${external.id} for update nowait`.then(
        () => true,
        (err: unknown) => sqlState(err) !== "55P03",
      );
      expect(free).toBe(true);
      await holder`rollback`;
      await written;
    } finally {
      holder.release();
    }
    const [row] = await stack.sql<{ posted: bigint }[]>`select posted from entities where id = ${a}`;
    expect(row!.posted).toBe(105n);
  });
});

describe("a chained write (docs/decisions/chained-writes.md)", () => {
  const subjectOf = (type: string) => eventSubject(stack.subjectPrefix, type);

  /**
   * Two transfers of 30 from a funded entity: the first written in a transaction the test holds
   * open, with its rows cached under that transaction's id as the batcher caches them; the second
   * built on the cached rows, so on what the first leaves, and sent while the first is open.
   * `end` then commits or rolls back the first.
   */
  async function chainBehindOpenTransaction(end: "commit" | "rollback") {
    const client = stack.ledgerClient(stack.account.api_key);
    const entity = async () => (await client.createEntity({ entityName: "chain", entityType: "wallet" })).entity!.entityId;
    const [a, b] = await Promise.all([entity(), entity()]);
    await client.fundEntity({ entityId: a, amount: 100n });
    const store = postgresBatchStore({ sql: stack.sql, subjectOf, entityCacheSize: 10 });
    for (const row of await stack.sql<BookEntity[]>`
      select ${stack.sql.unsafe(BOOK_ENTITY_COLUMNS)} from entities where id in (${a}, ${b})`)
      store.cache.remember(row);
    const transfer = (n: number): MoneyCommand => ({
      kind: "create",
      accountId: stack.account.account_id,
      programId: stack.account.program_id,
      requestId: `req_chain_${n}`,
      traceparent: "",
      description: `chain ${n}`,
      metadata: null,
      status: "posted",
      legs: [
        { entityId: a, direction: "debit", amount: 30n },
        { entityId: b, direction: "credit", amount: 30n },
      ],
    });
    const first = await stack.sql.reserve();
    try {
      await first`begin`;
      const [{ pid }] = (await first`select pg_backend_pid() as pid`) as unknown as [{ pid: number }];
      let cached = false;
      const open1 = store.openCachedBook([transfer(1)]) as CachedOpenBook;
      expect(open1.book.apply(transfer(1)).ok).toBe(true);
      await open1.writeOn(first as never, { cached: () => (cached = true) });
      // The first has written and not committed; the cache holds what it leaves, under its id.
      expect(cached).toBe(true);
      const [{ id }] = (await first`select pg_current_xact_id()::xid::text as id`) as unknown as [{ id: string }];
      expect(store.cache.row(a)).toMatchObject({ posted: 70n, version: id });
      const open2 = store.openCachedBook([transfer(2)]) as CachedOpenBook;
      expect(open2.book.apply(transfer(2)).ok).toBe(true);
      const second = open2.writeOn(stack.sql).then(
        () => undefined,
        (err: unknown) => err,
      );
      // The second waits in Postgres for the first's row locks.
      await expect.poll(() => waitingOn(pid)).toBe(1);
      await first.unsafe(end);
      const outcome = await second;
      const posted = await stack.sql<{ id: string; posted: bigint }[]>`select id, posted from entities where id in (${a}, ${b})`;
      const legs = await stack.sql<{ n: number }[]>`select count(*)::int as n from legs where entity_id = ${a}`;
      expect(await ledgerViolations(stack.sql, stack.account.account_id)).toEqual([]);
      return { outcome, a: posted.find((r) => r.id === a)!.posted, b: posted.find((r) => r.id === b)!.posted, legsOfA: legs[0]!.n };
    } finally {
      first.release();
    }
  }

  it("rests on rows another transaction wrote and has not committed, and commits once that one does", async () => {
    const result = await chainBehindOpenTransaction("commit");
    expect(result.outcome).toBeUndefined();
    // The funding's leg and both transfers'.
    expect(result).toMatchObject({ a: 40n, b: 60n, legsOfA: 3 });
  });

  it("writes nothing when the transaction it rests on rolls back", async () => {
    const result = await chainBehindOpenTransaction("rollback");
    expect(sqlState(result.outcome)).toBe("40001");
    expect(result).toMatchObject({ a: 100n, b: 0n, legsOfA: 1 });
  });
});

describe("EntityCache", () => {
  const row = (id: string, is_external = false): BookEntity => ({
    id,
    account_id: "acct",
    program_id: "prog",
    currency_code: "USD",
    is_external,
    status: "active",
    overdraft_limit: 0n,
    posted: 0n,
    pending_debits: 0n,
    pending_credits: 0n,
    held: 0n,
    version: "1",
  });

  it("keeps the most recently used ordinary entities up to its size, and every external one", () => {
    const cache = new EntityCache(2);
    cache.remember(row("ext", true));
    cache.remember(row("a"));
    cache.remember(row("b"));
    cache.remember(row("a")); // a is now the younger
    cache.remember(row("c"));
    expect(["a", "b", "c", "ext"].map((id) => cache.row(id) !== undefined)).toEqual([true, false, true, true]);
    expect(cache.size).toBe(2);
    expect(cache.externalIdFor("prog", "USD")).toBe("ext");
  });

  it("counts entities being written until every writer released them", () => {
    const cache = new EntityCache(10);
    const first = cache.claimWriting(["a", "b"]);
    const second = cache.claimWriting(["b"]);
    first();
    first(); // a second release changes nothing
    expect([cache.isWriting("a"), cache.isWriting("b")]).toEqual([false, true]);
    second();
    expect(cache.isWriting("b")).toBe(false);
  });

  it("wakes those waiting for written rows once none of their rows is written, oldest first", async () => {
    const cache = new EntityCache(10);
    const first = cache.claimWriting(["a", "b"]);
    const second = cache.claimWriting(["c"]);
    const woken: string[] = [];
    const wait = (name: string, ids: string[]) => cache.whenWritten(ids).then(() => woken.push(name));
    const waits = [wait("a and c", ["a", "c"]), wait("b", ["b"]), wait("a", ["a"])];
    await cache.whenWritten(["d"]); // nothing to wait for: resolves at once
    expect(woken).toEqual([]);
    first();
    await Promise.resolve();
    expect(woken).toEqual(["b", "a"]);
    second();
    await Promise.all(waits);
    expect(woken).toEqual(["b", "a", "a and c"]);
  });
});
