import { randomBytes } from "node:crypto";
import postgres from "postgres";
import { afterAll, beforeAll, expect, inject, it } from "vitest";
import { partitionByHash } from "./partition-by-hash.js";

// partitionByHash: a schema's tables recreated partitioned, with their rows, keys, foreign keys and
// triggers; and refused, changing nothing, when a key leaves out the partition column.

const schema = `partition_${randomBytes(4).toString("hex")}`;
let sql: postgres.Sql<Record<string, unknown>>;

beforeAll(async () => {
  sql = postgres(inject("databaseUrl"), { max: 1, onnotice: () => {}, connection: { search_path: schema } });
  await sql.unsafe(`
    create schema ${schema};
    set search_path to ${schema};
    create table parents (account_id text not null, id text not null, primary key (account_id, id));
    create table children (
      account_id text not null, id text not null, parent_id text not null, n bigserial, amount int not null check (amount > 0),
      primary key (account_id, id), foreign key (account_id, parent_id) references parents (account_id, id));
    create table loose (id text primary key, account_id text not null);
    create function refuse_seven() returns trigger language plpgsql as $$
      begin if new.amount = 7 then raise exception 'seven'; end if; return new; end $$;
    create trigger refuse_seven before insert on children for each row execute function refuse_seven();
    insert into parents values ('a', 'p1'), ('b', 'p2');
    insert into children (account_id, id, parent_id, amount) values ('a', 'c1', 'p1', 1), ('b', 'c2', 'p2', 2);`);
});
afterAll(async () => {
  await sql?.unsafe(`drop schema if exists ${schema} cascade`);
  await sql?.end({ timeout: 2 });
});

const partitioned = async () =>
  (
    await sql<{ name: string }[]>`
      select c.relname as name from pg_class c join pg_namespace n on n.oid = c.relnamespace
      where n.nspname = ${schema} and c.relkind = 'p' order by 1`
  ).map((r) => r.name);

it("refuses a table whose primary key leaves out the partition column, and changes nothing", async () => {
  await expect(partitionByHash(sql, { schema, tables: ["parents", "loose"], column: "account_id", partitions: 4 })).rejects.toThrow(
    /partition/i,
  );
  expect(await partitioned()).toEqual([]);
});

it("recreates the tables partitioned, keeping rows, checks, serials, foreign keys and triggers", async () => {
  await partitionByHash(sql, { schema, tables: ["parents", "children"], column: "account_id", partitions: 4 });
  expect(await partitioned()).toEqual(["children", "parents"]);
  expect(await sql`select account_id, id, n from children order by id`).toEqual([
    { account_id: "a", id: "c1", n: "1" },
    { account_id: "b", id: "c2", n: "2" },
  ]);
  await sql`insert into children (account_id, id, parent_id, amount) values ('a', 'c3', 'p1', 3)`;
  expect((await sql`select n from children where id = 'c3'`)[0]).toEqual({ n: "3" });
  const refusal = (statement: Promise<unknown>) =>
    statement.then(
      () => "ok",
      (err: { code?: string }) => err.code,
    );
  // The parent of another account does not count: the foreign key is composite.
  expect(await refusal(sql`insert into children (account_id, id, parent_id, amount) values ('a', 'c4', 'p2', 1)`)).toBe("23503");
  expect(await refusal(sql`insert into children (account_id, id, parent_id, amount) values ('a', 'c1', 'p1', 1)`)).toBe("23505");
  expect(await refusal(sql`insert into children (account_id, id, parent_id, amount) values ('a', 'c5', 'p1', 0)`)).toBe("23514");
  expect(await refusal(sql`insert into children (account_id, id, parent_id, amount) values ('a', 'c6', 'p1', 7)`)).toBe("P0001");
});
