import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createLogger, metricsRegistry, type Sql } from "@ledger/common";
import { expectHeldMatches, startStack, type Stack } from "@ledger/e2e";
import { answerLosingProxy } from "@ledger/testing";
import { createGroupCommit, type Work } from "./group-commit.js";

// Group commit in the hold service: concurrent intents and completions share transactions, and
// each step still gets its own answer. A refused step leaves its neighbours alone; a transaction
// that Postgres refused as a whole is retried one step at a time, and one whose answer was lost
// is not run again; steps on one hold never share one.

let stack: Stack;
let sql: Sql;

beforeAll(async () => {
  stack = await startStack();
  sql = stack.holdSql() as unknown as Sql;
  await sql`create table if not exists group_commit_probe (id int primary key)`;
});
afterAll(async () => stack?.close());

async function batchStats(): Promise<{ sum: number; count: number }> {
  const metric = (await metricsRegistry.getSingleMetric("hold_batch_steps")!.get()).values;
  const read = (name: string) => metric.filter((v) => (v as { metricName?: string }).metricName === name).reduce((n, v) => n + v.value, 0);
  return { sum: read("hold_batch_steps_sum"), count: read("hold_batch_steps_count") };
}

/**
 * Holds the group commit's one transaction in flight for 200 ms (the tests give it `maxInFlight: 1`),
 * so the steps queued meanwhile go together in the next one.
 */
function occupy(commits: ReturnType<typeof createGroupCommit>): Promise<string> {
  return commits.transaction(["x"], async (tx) => {
    await tx`select pg_sleep(0.2)`;
    return "blocker";
  });
}

describe("group commit", () => {
  it("answers each step of a shared transaction on its own, and retries one by one when it fails as a whole", async () => {
    await sql`delete from group_commit_probe`;
    await sql`insert into group_commit_probe values (0)`;
    // One transaction in flight: while the first step holds it, the others queue and go together.
    const commits = createGroupCommit({ sql, log: createLogger("test", "error"), maxBatch: 64, maxInFlight: 1, lingerMs: 0 });
    const txid = (tx: Parameters<Work<unknown>>[0]) => tx<{ id: string }[]>`select txid_current()::text as id`.then((rows) => rows[0]!.id);
    const insert =
      (id: number): Work<string> =>
      async (tx, writes) => {
        writes.push(tx`insert into group_commit_probe values (${id})`.execute());
        return txid(tx);
      };
    const refuse: Work<string> = async (tx) => {
      await txid(tx);
      throw new Error("refused after reading");
    };
    const blocker = occupy(commits);

    const shared = await Promise.allSettled([
      commits.transaction(["a"], insert(1)),
      commits.transaction(["b"], refuse),
      commits.transaction(["c"], insert(2)),
      // Same key as the first: waits for the next transaction.
      commits.transaction(["a"], insert(3)),
    ]);
    await blocker;
    const [one, refused, two, three] = shared;
    expect(refused).toMatchObject({ status: "rejected", reason: { message: "refused after reading" } });
    expect(one).toMatchObject({ status: "fulfilled" });
    expect(two).toMatchObject({ status: "fulfilled" });
    expect(three).toMatchObject({ status: "fulfilled" });
    const ids = [one, two, three].map((r) => (r as PromiseFulfilledResult<string>).value);
    expect(ids[0]).toBe(ids[1]);
    expect(ids[2]).not.toBe(ids[0]);

    // A duplicate row fails the shared transaction as a whole: the others still commit, each alone.
    const blocker2 = occupy(commits);
    const failing = await Promise.allSettled([
      commits.transaction(["d"], insert(4)),
      commits.transaction(["e"], insert(0)),
      commits.transaction(["f"], insert(5)),
    ]);
    await blocker2;
    expect(failing.map((r) => r.status)).toEqual(["fulfilled", "rejected", "fulfilled"]);
    expect((await sql<{ id: number }[]>`select id from group_commit_probe order by id`).map((r) => r.id)).toEqual([0, 1, 2, 3, 4, 5]);

    // A read that Postgres refuses (a deadlock's victim, here a division by zero) fails its step, and
    // also the transaction: Postgres answers its COMMIT with ROLLBACK. The others still commit, each alone.
    const blocker3 = occupy(commits);
    const failedRead: Work<string> = async (tx) => {
      await tx`select 1 / (select count(*) from group_commit_probe where id < 0)`;
      return "unreachable";
    };
    const aborted = await Promise.allSettled([
      commits.transaction(["g"], insert(6)),
      commits.transaction(["h"], failedRead),
      commits.transaction(["i"], insert(7)),
    ]);
    await blocker3;
    expect(aborted.map((r) => r.status)).toEqual(["fulfilled", "rejected", "fulfilled"]);
    expect((aborted[1] as PromiseRejectedResult).reason).toMatchObject({ code: "22012" });
    expect((await sql<{ id: number }[]>`select id from group_commit_probe order by id`).map((r) => r.id)).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
  });

  it("runs no step again when a shared transaction's answer is lost, since it may have committed", async () => {
    // The group commit reaches Postgres through a proxy that, once armed, passes the marked insert
    // and the COMMIT sent right behind it, drops every answer from there on and cuts the connection.
    const proxy = await answerLosingProxy(new URL(stack.holdDatabaseUrl), "group_commit_lost_answer");
    const direct = postgres(stack.holdDatabaseUrl, { max: 1, onnotice: () => {} });
    await direct`create table if not exists group_commit_lost_probe (id int)`;
    await direct`delete from group_commit_lost_probe`;
    // Armed before the group commit opens any connection, so it knows the marked statement by its text.
    proxy.arm();
    const through = postgres(proxy.url, { max: 2, onnotice: () => {} });
    try {
      const commits = createGroupCommit({
        sql: through as unknown as Sql,
        log: createLogger("test", "fatal"),
        maxBatch: 64,
        maxInFlight: 1,
        lingerMs: 0,
      });
      // Steps that read, then send their insert: once the reads are answered (BEGIN's answer with
      // them), the three inserts and COMMIT go out together, and no answer is awaited before COMMIT.
      const insert =
        (id: number, marked = false): Work<number> =>
        async (tx, writes) => {
          await tx`select 1`;
          // No parameters: postgres.js sends a new statement with parameters only once Postgres has
          // described them, and COMMIT would wait behind that round trip, as it does not once warm.
          const marker = marked ? "/* group_commit_lost_answer */" : "";
          writes.push(tx.unsafe(`insert into group_commit_lost_probe ${marker} values (${id})`).execute());
          return id;
        };
      // A transaction of its own first (it starts at the end of this turn), so the three queue
      // behind it and share the next one, with no read of its own waiting behind the marked insert.
      const blocker = occupy(commits);
      await new Promise((done) => setTimeout(done, 50));
      const outcomes = await Promise.allSettled([
        commits.transaction(["a"], insert(1)),
        commits.transaction(["b"], insert(2)),
        commits.transaction(["c"], insert(3, true)),
      ]);
      await blocker;
      expect(proxy.fired()).toBe(true);
      // Nobody is told of a success the service cannot vouch for...
      expect(outcomes.map((o) => o.status)).toEqual(["rejected", "rejected", "rejected"]);
      // ...and the transaction did commit, once: running its steps again, one by one, would have
      // inserted each row a second time through the (no longer armed) proxy.
      const rows = await direct<{ id: number }[]>`select id from group_commit_lost_probe order by id`;
      expect(rows.map((r) => r.id)).toEqual([1, 2, 3]);
    } finally {
      await through.end({ timeout: 1 });
      await direct.end();
      await proxy.close();
    }
  });

  it("starts the steps of a transaction in the code-unit order of what they touch", async () => {
    const commits = createGroupCommit({ sql, log: createLogger("test", "error"), maxBatch: 64, maxInFlight: 1, lingerMs: 0 });
    const started: string[] = [];
    const step =
      (key: string): Work<string> =>
      async (tx) => {
        started.push(key);
        return tx<{ id: string }[]>`select txid_current()::text as id`.then((rows) => rows[0]!.id);
      };
    const blocker = occupy(commits);
    // Queued behind the blocker, so the three share the next transaction. A locale's collation
    // would put "hld_a" first (it ignores case before anything else); code units put "C" (67)
    // before "a" (97).
    const txids = await Promise.all(["hld_b", "hld_C", "hld_a"].map((key) => commits.transaction([key], step(key))));
    await blocker;
    expect(new Set(txids).size).toBe(1);
    expect(started).toEqual(["hld_C", "hld_a", "hld_b"]);
  });

  it("captures every hold exactly once under concurrent keyed and unkeyed holds and captures", async () => {
    const api = stack.api;
    const entity = async () => (await api.post("/entity", { entity_name: "w", entity_type: "wallet" })).body.entity.entity_id as string;
    const [source, sink] = [await entity(), await entity()];
    await api.post("/entity/fund", { entity_id: source, amount: 10_000 });
    const before = await batchStats();

    const run = `${Date.now()}`;
    const created = await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        api.post("/hold", { entity_id: source, amount: 100 }, i % 2 === 0 ? { "idempotency-key": `gc-hold-${run}-${i}` } : {}),
      ),
    );
    expect(created.map((c) => c.status)).toEqual(created.map(() => 200));
    const holdIds = created.map((c) => c.body.hold.hold_id as string);

    // Per hold: two captures of 30, each sent twice at once with one key, and one of 50. Any two of
    // them fit in 100 and all three do not, so exactly one of the three is refused.
    const results = await Promise.all(
      holdIds.map(async (holdId, i) => {
        const capture = (amount: number, key?: string) =>
          api.post("/hold/capture", { hold_id: holdId, amount, destination_entity_id: sink }, key ? { "idempotency-key": key } : {});
        const [a, aAgain, b, bAgain, c] = await Promise.all([
          capture(30, `gc-cap-${run}-${i}-a`),
          capture(30, `gc-cap-${run}-${i}-a`),
          capture(30, `gc-cap-${run}-${i}-b`),
          capture(30, `gc-cap-${run}-${i}-b`),
          capture(50, `gc-cap-${run}-${i}-c`),
        ]);
        // The refused one's key was dropped with its refusal, even in a transaction that committed
        // others: sent again, it is tried afresh and refused again, not left waiting.
        const refused = [a, b, c].findIndex((r) => r.status !== 200);
        const again = refused < 0 ? undefined : await capture([30, 30, 50][refused]!, `gc-cap-${run}-${i}-${"abc"[refused]}`);
        return { a, aAgain, b, bAgain, c, again };
      }),
    );
    let captured = 0;
    for (const { a, aAgain, b, bAgain, c, again } of results) {
      // A repeated key answers what its first request did, the same transfer or the same refusal.
      expect(aAgain.status, JSON.stringify([a.body, aAgain.body])).toBe(a.status);
      expect(bAgain.status).toBe(b.status);
      if (a.status === 200) expect(aAgain.body.transaction.transaction_group_id).toBe(a.body.transaction.transaction_group_id);
      if (b.status === 200) expect(bAgain.body.transaction.transaction_group_id).toBe(b.body.transaction.transaction_group_id);
      const outcomes = [a, b, c];
      expect(outcomes.filter((r) => r.status === 200)).toHaveLength(2);
      expect(outcomes.find((r) => r.status !== 200)?.body.error.code).toBe("capture_exceeds_hold");
      expect(again?.status, JSON.stringify(again?.body)).toBe(422);
      expect(again?.body.error.code).toBe("capture_exceeds_hold");
      captured += (a.status === 200 ? 30 : 0) + (b.status === 200 ? 30 : 0) + (c.status === 200 ? 50 : 0);
    }

    // Exact balances: what the captures answered moved once, the rest stays held.
    const balances = async (id: string) => (await api.get("/entity", { entity_id: id })).body.entity.balances;
    expect(await balances(sink)).toMatchObject({ posted: captured });
    expect(await balances(source)).toMatchObject({ posted: 10_000 - captured, held: 4_000 - captured });
    const holds = await stack.holdSql()<{ captured: bigint; captures: bigint }[]>`
      select (select sum(captured_amount) from holds where id = any(${holdIds}))::int8 as captured,
             (select count(*) from captures where hold_id = any(${holdIds}) and status = 'done')::int8 as captures`;
    expect(holds[0]).toEqual({ captured: BigInt(captured), captures: 80n });
    await expectHeldMatches(stack);

    // The steps did share transactions (more steps than transactions).
    const after = await batchStats();
    expect(after.sum - before.sum).toBeGreaterThan(after.count - before.count);
  });
});
