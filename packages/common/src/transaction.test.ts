import { randomBytes } from "node:crypto";
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import type { Sql } from "./db.js";
import { transaction } from "./transaction.js";

// `transaction` turns a lost deadlock or serialization conflict into a repeat run, so the caller
// gets the outcome and not the collision. A table of its own in the shared test database.

const table = `transaction_test_${randomBytes(4).toString("hex")}`;
let sql: Sql;

beforeAll(async () => {
  sql = postgres(inject("databaseUrl"), { max: 4, onnotice: () => {} }) as unknown as Sql;
  await sql.unsafe(`create table ${table} (id text primary key, n int not null default 0)`);
  await sql.unsafe(`insert into ${table} (id) values ('a'), ('b')`);
});
afterAll(async () => {
  await sql?.unsafe(`drop table if exists ${table}`);
  await sql?.end({ timeout: 2 });
});

describe("transaction", () => {
  it("runs a transaction again when Postgres picks it as a deadlock victim, so both callers succeed", async () => {
    let runs = 0;
    let bothLockedFirst: () => void;
    const firstLocks = new Promise<void>((resolve) => (bothLockedFirst = resolve));
    let locked = 0;
    // Each locks one row, waits until the other has locked the other row, then wants it: a real
    // deadlock, which Postgres breaks by aborting one of them with 40P01.
    const crosswise = (first: string, second: string) =>
      transaction(sql, async (tx) => {
        runs++;
        await tx.unsafe(`update ${table} set n = n + 1 where id = $1`, [first]);
        if (++locked === 2) bothLockedFirst();
        await firstLocks;
        await tx.unsafe(`update ${table} set n = n + 1 where id = $1`, [second]);
        return first;
      });
    await expect(Promise.all([crosswise("a", "b"), crosswise("b", "a")])).resolves.toEqual(["a", "b"]);
    expect(runs).toBe(3);
    // Each committed once: the victim's first run left nothing behind.
    expect(await sql.unsafe(`select id, n from ${table} order by id`)).toEqual([
      { id: "a", n: 2 },
      { id: "b", n: 2 },
    ]);
  });

  it("gives up after the attempts it was given, and passes any other error on at once", async () => {
    let runs = 0;
    const deadlocked = Object.assign(new Error("deadlock detected"), { code: "40P01" });
    await expect(
      transaction(
        sql,
        async () => {
          runs++;
          throw deadlocked;
        },
        3,
      ),
    ).rejects.toBe(deadlocked);
    expect(runs).toBe(3);
    runs = 0;
    await expect(
      transaction(sql, async (tx) => {
        runs++;
        await tx`select 1/0`;
      }),
    ).rejects.toMatchObject({ code: "22012" });
    expect(runs).toBe(1);
  });
});
