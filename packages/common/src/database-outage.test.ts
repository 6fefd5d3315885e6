import { randomBytes } from "node:crypto";
import * as net from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import { Code } from "@connectrpc/connect";
import postgres from "postgres";
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from "vitest";
import { freePort } from "@ledger/testing";
import { pipelinedTransaction, type Sql } from "./db.js";
import { errorCodeOf } from "./errors.js";
import { clientSafeError } from "./database-errors.js";

// What the services see when Postgres goes away under them (a restart, a failover, an operator
// terminating backends): every waiting query must reject with an error that maps to 503
// `unavailable`, nothing may throw where no caller can catch it, and the pool must serve again
// once Postgres is back. postgres.js 3.4.9 threw from a setImmediate when a connection wrote
// after its socket had closed, which ended the process; patches/postgres@3.4.9.patch fixes that.

const url = () => inject("databaseUrl");
let admin: postgres.Sql;
const pools: postgres.Sql[] = [];

// An exception thrown where no caller can catch it: what used to end the process.
const uncaught: unknown[] = [];
const recordUncaught = (err: unknown) => uncaught.push(err);

beforeAll(() => {
  admin = postgres(url(), { max: 1, onnotice: () => {} });
  process.on("uncaughtException", recordUncaught);
});
afterEach(() => {
  expect(uncaught.splice(0).map(String)).toEqual([]);
});
afterAll(async () => {
  process.off("uncaughtException", recordUncaught);
  for (const pool of pools) await pool.end({ timeout: 1 }).catch(() => {});
  await admin.end({ timeout: 1 });
});

/** A pool whose backends can be told apart from every other connection by application_name. */
function pool(max: number) {
  const name = `outage-${randomBytes(4).toString("hex")}`;
  const sql = postgres(url(), { max, onnotice: () => {}, connection: { application_name: name } });
  pools.push(sql);
  return { sql, name };
}

/** Waits until Postgres has ended `pid` and the client has had time to see its socket close. */
async function terminated(pid: number) {
  await admin`select pg_terminate_backend(${pid})`;
  while ((await admin`select 1 from pg_stat_activity where pid = ${pid}`).length > 0) await sleep(20);
  await sleep(100);
}

/** The error a promise rejected with; fails the test if it resolved. */
async function rejection(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (err) {
    return err;
  }
  throw new Error("expected the query to reject, and it resolved");
}

function code(err: unknown): string {
  return String((err as { code?: unknown }).code);
}

/** What a client would be answered for this error: the RPC code and the envelope's error code. */
function answer(err: unknown) {
  const safe = clientSafeError(err);
  return { rpc: Code[safe.code], code: errorCodeOf(safe).code };
}
const UNAVAILABLE = { rpc: "Unavailable", code: "unavailable" };

describe("postgres.js when its backends are terminated", () => {
  it("rejects a query on a reserved connection whose backend is gone, and the pool serves the next caller", async () => {
    const { sql } = pool(1);
    const reserved = await sql.reserve();
    const { pid } = (await reserved<{ pid: number }[]>`select pg_backend_pid() as pid`)[0]!;
    await terminated(pid);

    // Before the patch this write landed on a null socket in a setImmediate and ended the process.
    const closed = await rejection(reserved`select 1 as one`);
    expect(code(closed)).toBe("CONNECTION_CLOSED");
    expect(answer(closed)).toEqual(UNAVAILABLE);
    expect(code(await rejection(reserved`select ${"x".repeat(4_000)}::text as big`))).toBe("CONNECTION_CLOSED");
    reserved.release();

    // The pool's one connection died; the next caller gets a fresh one, not the dead one.
    const { one } = (await sql<{ one: number }[]>`select 1 as one`)[0]!;
    expect(one).toBe(1);
  });

  it("rejects a transaction whose backend is terminated mid-statement, and its rollback does not throw", async () => {
    const { sql } = pool(1);
    let pid = 0;
    const tx = sql.begin(async (t) => {
      pid = (await t<{ pid: number }[]>`select pg_backend_pid() as pid`)[0]!.pid;
      await t`select pg_sleep(5)`;
    });
    tx.catch(() => {});
    while (pid === 0) await sleep(10);
    await terminated(pid);
    expect(answer(await rejection(tx))).toEqual(UNAVAILABLE);
    const { one } = (await sql<{ one: number }[]>`select 1 as one`)[0]!;
    expect(one).toBe(1);
  });

  it("rejects a pipelined transaction whose backend is terminated between its writes, big and small, then serves the next", async () => {
    const { sql: raw } = pool(2);
    const sql = raw as unknown as Sql;
    const table = `outage_${randomBytes(4).toString("hex")}`;
    await raw.unsafe(`create table ${table} (id bigserial primary key, body text not null)`);
    const big = "b".repeat(64 * 1024); // written at once; a small statement waits for a setImmediate
    const failed = await rejection(
      pipelinedTransaction(sql, async (tx, writes) => {
        const { pid } = (await tx<{ pid: number }[]>`select pg_backend_pid() as pid`)[0]!;
        writes.push(
          tx`insert into ${tx(table)} (body) values (${big})`.execute(),
          tx`insert into ${tx(table)} (body) values ('s')`.execute(),
        );
        await terminated(pid);
        // Written after the socket closed: before the patch these threw from a setImmediate.
        writes.push(
          tx`insert into ${tx(table)} (body) values ('s')`.execute(),
          tx`insert into ${tx(table)} (body) values (${big})`.execute(),
        );
      }),
    );
    expect(answer(failed)).toEqual(UNAVAILABLE);

    await pipelinedTransaction(sql, async (tx, writes) => {
      writes.push(tx`insert into ${tx(table)} (body) values ('after')`.execute());
    });
    const rows = await raw`select body from ${raw(table)}`;
    expect(rows.map((r) => r["body"])).toEqual(["after"]);
  });
});

/**
 * A TCP proxy on loopback in front of the test's Postgres; `reset()` cuts every connection through
 * it with a TCP reset, so the client reads ECONNRESET, as it does when Postgres is stopped or a
 * network path fails under it.
 */
async function resettingProxy(databaseUrl: string): Promise<{ url: string; reset: () => void; close: () => Promise<void> }> {
  const target = new URL(databaseUrl);
  const pairs = new Set<[net.Socket, net.Socket]>();
  const server = net.createServer((client) => {
    const upstream = net.connect(Number(target.port || 5432), target.hostname);
    const pair: [net.Socket, net.Socket] = [client, upstream];
    pairs.add(pair);
    for (const socket of pair) {
      socket.on("error", () => {});
      socket.once("close", () => pairs.delete(pair));
    }
    client.pipe(upstream).pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const url = new URL(databaseUrl);
  url.host = `127.0.0.1:${(server.address() as net.AddressInfo).port}`;
  const reset = () => {
    for (const [client, upstream] of pairs) {
      client.resetAndDestroy();
      upstream.destroy();
    }
  };
  return {
    url: url.toString(),
    reset,
    close: async () => {
      reset();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** What `promise` resolved or rejected with, or "still waiting" when it has not settled within `ms`. */
function within(promise: Promise<unknown>, ms: number): Promise<unknown> {
  return Promise.race([promise.catch((err: unknown) => err), sleep(ms).then(() => "still waiting")]);
}

describe("postgres.js when its connection is reset", () => {
  // postgres.js 3.4.9 kept a query it had rejected as the one in flight: a statement sent between the
  // socket's error and its close (a pipelined transaction's rollback) was queued behind it, never
  // rejected, and after the reconnect the next answers went to the wrong queries.
  it("rejects a pipelined transaction reset under a read, rolls it back without waiting for ever, and answers each next query its own", async () => {
    const proxy = await resettingProxy(url());
    try {
      const sql = postgres(proxy.url, { max: 1, onnotice: () => {} }) as unknown as Sql;
      pools.push(sql as unknown as postgres.Sql);
      let reading = false;
      const transaction = pipelinedTransaction(sql, async (tx, writes) => {
        writes.push(tx`set local synchronous_commit = off`.execute());
        reading = true;
        await tx`select pg_sleep(5)`;
      });
      while (!reading) await sleep(5);
      await sleep(100);
      proxy.reset();
      const outcome = await within(transaction, 3_000);
      expect(code(outcome)).toBe("ECONNRESET");
      for (const n of [1, 2, 3]) {
        const rows = await within(sql.unsafe(`select ${n} as n`), 3_000);
        expect(rows).toEqual([{ n }]);
      }
    } finally {
      await proxy.close();
    }
  });
});

/**
 * A TCP server on loopback that plays a Postgres that is going away: `onStartup` gets each
 * connection once the client has sent its startup message.
 */
async function goingAwayServer(onStartup: (socket: net.Socket) => void): Promise<{ port: number; close: () => Promise<void> }> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.on("error", () => {});
    socket.once("data", () => onStartup(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    port: (server.address() as net.AddressInfo).port,
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** A FATAL ErrorResponse, as Postgres sends it before closing a connection it refuses. */
function fatal(sqlState: string, message: string): Buffer {
  const fields = Buffer.from(`SFATAL\0VFATAL\0C${sqlState}\0M${message}\0\0`);
  const head = Buffer.alloc(5);
  head.write("E");
  head.writeInt32BE(4 + fields.length, 1);
  return Buffer.concat([head, fields]);
}

describe("clientSafeError for a database that is away", () => {
  it("answers 503 unavailable for a statement whose backend was terminated under it", async () => {
    const { sql } = pool(1);
    const { pid } = (await sql<{ pid: number }[]>`select pg_backend_pid() as pid`)[0]!;
    const pending = sql`select pg_sleep(5)`.execute();
    pending.catch(() => {});
    await sleep(100);
    await admin`select pg_terminate_backend(${pid})`;
    const err = await rejection(pending);
    // Postgres sends 57P01 and closes; postgres.js keeps the 57P01 for a ReadyForQuery that never
    // comes and rejects with CONNECTION_CLOSED, or ECONNRESET when the close arrives as a reset.
    expect(["CONNECTION_CLOSED", "ECONNRESET", "57P01"]).toContain(code(err));
    expect(answer(err)).toEqual(UNAVAILABLE);
  });

  it("answers 503 unavailable for a pool that is ending (CONNECTION_ENDED) or ended under a query (CONNECTION_DESTROYED)", async () => {
    const { sql } = pool(1);
    await sql`select 1`;
    const pending = sql`select pg_sleep(5)`.execute();
    pending.catch(() => {});
    await sleep(100);
    const ending = sql.end({ timeout: 0 });
    const after = rejection(sql`select 1`);
    const destroyed = await rejection(pending);
    await ending;
    const ended = await after;
    expect([code(destroyed), code(ended)]).toEqual(["CONNECTION_DESTROYED", "CONNECTION_ENDED"]);
    expect([answer(destroyed), answer(ended)]).toEqual([UNAVAILABLE, UNAVAILABLE]);
  });

  it("answers 503 unavailable when nothing listens where Postgres was (ECONNREFUSED)", async () => {
    const port = await freePort();
    const sql = postgres(`postgres://root@127.0.0.1:${port}/ledger`, { max: 1, onnotice: () => {} });
    pools.push(sql);
    const err = await rejection(sql`select 1`);
    expect(code(err)).toBe("ECONNREFUSED");
    expect(answer(err)).toEqual(UNAVAILABLE);
  });

  it.each([
    ["ECONNRESET", (socket: net.Socket) => socket.resetAndDestroy()],
    ["57P02", (socket: net.Socket) => socket.end(fatal("57P02", "terminating connection because of crash of another server process"))],
    ["57P03", (socket: net.Socket) => socket.end(fatal("57P03", "the database system is starting up"))],
    ["57P01", (socket: net.Socket) => socket.end(fatal("57P01", "terminating connection due to administrator command"))],
  ])("answers 503 unavailable when the server ends the connection with %s", async (expected, goAway) => {
    const server = await goingAwayServer(goAway);
    try {
      const sql = postgres(`postgres://root@127.0.0.1:${server.port}/ledger`, { max: 1, onnotice: () => {} });
      pools.push(sql);
      const err = await rejection(sql`select 1`);
      expect(code(err)).toBe(expected);
      expect(answer(err)).toEqual(UNAVAILABLE);
    } finally {
      await server.close();
    }
  });
});
