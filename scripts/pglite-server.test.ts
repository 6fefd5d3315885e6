import { mkdtempSync, rmSync } from "node:fs";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import postgres from "postgres";
import { afterAll, beforeAll, expect, it } from "vitest";
import { startEmbeddedPostgres, type EmbeddedPostgres } from "./embedded-postgres.js";

// The embedded database behind many postgres.js connections: one PGlite session, shared one
// transaction at a time. No mock: real PGlite, real sockets, real postgres.js pools.

const dataRoot = mkdtempSync(join(tmpdir(), "pglite-server-"));
const dataDir = join(dataRoot, "pglite");
let embedded: EmbeddedPostgres;
type Sql = postgres.Sql<{ bigint: bigint }>;
const pools: Sql[] = [];

function pool(searchPath: string, max: number): Sql {
  const sql = postgres(embedded.url, {
    max,
    types: { bigint: postgres.BigInt },
    onnotice: () => {},
    connection: { search_path: searchPath, application_name: `test-${searchPath}` },
  }) as unknown as Sql;
  pools.push(sql);
  return sql;
}

beforeAll(async () => {
  // The first start runs initdb inside WebAssembly: seconds on a busy machine.
  embedded = await startEmbeddedPostgres({ dataDir, host: "127.0.0.1", port: 0 });
  const admin = pool("public", 1);
  await admin.unsafe(`
    create schema a; create table a.t (v text); insert into a.t values ('a');
    create schema b; create table b.t (v text); insert into b.t values ('b');
    create schema bank;
    create table bank.accounts (id int primary key, balance bigint not null);
    create table bank.legs (id serial primary key, account int not null, delta bigint not null);
    insert into bank.accounts values (1, 1000), (2, 1000), (3, 1000);
    create table bank.ghost (v int)`);
}, 120_000);

afterAll(async () => {
  for (const sql of pools) await sql.end({ timeout: 1 }).catch(() => {});
  await embedded?.close();
  rmSync(dataRoot, { recursive: true, force: true });
});

it("gives every connection the search_path of its own startup parameters", async () => {
  const a = pool("a", 4);
  const b = pool("b", 4);
  const reads = Array.from({ length: 60 }, (_, i) =>
    i % 2 === 0 ? a`select v from t`.then((r) => ["a", r[0]!["v"]]) : b`select v from t`.then((r) => ["b", r[0]!["v"]]),
  );
  for (const [expected, seen] of await Promise.all(reads)) expect(seen).toBe(expected);
});

it("never interleaves the statements of concurrent transactions", async () => {
  // Read-modify-write without row locks, with a pause between the read and the write: if another
  // connection's statements could run in between, updates would be lost and the legs would not
  // add up to the balances. Prepared statements (postgres.js's default) on every connection.
  const sql = pool("bank", 8);
  const transfers = Array.from({ length: 120 }, (_, i) => ({ from: (i % 3) + 1, to: ((i + 1) % 3) + 1, amount: BigInt((i % 7) + 1) }));
  await Promise.all(
    transfers.map(({ from, to, amount }, i) =>
      sql.begin(async (tx) => {
        if (i % 2 === 0) await tx`select pg_advisory_xact_lock(42)`;
        const [source] = await tx<{ balance: bigint }[]>`select balance from accounts where id = ${from}`;
        await new Promise((resolve) => setTimeout(resolve, i % 3));
        await tx`update accounts set balance = ${source!.balance - amount} where id = ${from}`;
        const [target] = await tx<{ balance: bigint }[]>`select balance from accounts where id = ${to}`;
        await tx`update accounts set balance = ${target!.balance + amount} where id = ${to}`;
        await tx`insert into legs (account, delta) values (${from}, ${-amount}), (${to}, ${amount})`;
      }),
    ),
  );
  const expected = new Map([1, 2, 3].map((id) => [id, 1000n]));
  for (const { from, to, amount } of transfers) {
    expected.set(from, expected.get(from)! - amount);
    expected.set(to, expected.get(to)! + amount);
  }
  const rows = await sql<{ id: number; balance: bigint; legs: bigint }[]>`
    select a.id, a.balance, coalesce(sum(l.delta), 0)::int8 as legs from accounts a left join legs l on l.account = a.id group by a.id order by a.id`;
  for (const row of rows) {
    expect(row.balance).toBe(expected.get(row.id));
    expect(row.balance).toBe(1000n + row.legs);
  }
  const [sum] = await sql<{ total: bigint }[]>`select sum(balance)::int8 as total from accounts`;
  expect(sum!.total).toBe(3000n);
  const [legs] = await sql<{ count: bigint }[]>`select count(*) from legs`;
  expect(legs!.count).toBe(240n);
});

it("rolls back the transaction of a connection that disappears, and lets the others go on", async () => {
  const port = Number(new URL(embedded.url).port);
  const socket = connect(port, "127.0.0.1");
  await new Promise<void>((resolve) => socket.once("connect", () => resolve()));
  const params = Buffer.from("user\0postgres\0database\0ledger\0search_path\0bank\0\0");
  const startup = Buffer.alloc(8);
  startup.writeInt32BE(8 + params.length, 0);
  startup.writeInt32BE(196608, 4);
  socket.write(Buffer.concat([startup, params]));
  const query = Buffer.from("begin; insert into ghost values (1)\0");
  const header = Buffer.alloc(5);
  header.write("Q", 0, "latin1");
  header.writeInt32BE(query.length + 4, 1);
  // Wait until the insert ran: its ReadyForQuery says the session is in a transaction ('T').
  const inTransaction = new Promise<void>((resolve) => {
    let seen = Buffer.alloc(0);
    socket.on("data", (chunk) => {
      seen = Buffer.concat([seen, chunk]);
      if (seen.includes(Buffer.from([0x5a, 0, 0, 0, 5, 0x54]))) resolve();
    });
  });
  socket.write(Buffer.concat([header, query]));
  await inTransaction;
  // Another connection waits for the session meanwhile, then gets it once the dead one is gone.
  const sql = pool("bank", 2);
  const waiting = sql<{ n: bigint }[]>`select count(*) as n from ghost`;
  socket.destroy();
  const [row] = await waiting;
  expect(row!.n).toBe(0n);
});

it("keeps the data across a clean stop and a new start on the same folder", async () => {
  for (const sql of pools.splice(0)) await sql.end({ timeout: 1 });
  await embedded.close();
  embedded = await startEmbeddedPostgres({ dataDir, host: "127.0.0.1", port: 0 });
  const sql = pool("bank", 1);
  const [sum] = await sql<{ total: bigint }[]>`select sum(balance)::int8 as total from accounts`;
  expect(sum!.total).toBe(3000n);
});

it("refuses a second start on a folder in use", async () => {
  await expect(startEmbeddedPostgres({ dataDir, host: "127.0.0.1", port: 0 })).rejects.toThrow(/in use by process/);
});
