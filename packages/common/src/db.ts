import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import postgres from "postgres";
import type { Logger } from "pino";

/** A postgres.js client; one per process and database, shared by everything in it. */
export type Sql = postgres.Sql<{ bigint: bigint }>;
/** A client inside `sql.begin`, for code that must run in the caller's transaction. */
export type Tx = postgres.TransactionSql<{ bigint: bigint }>;

/** Options for `openDatabase`. */
export interface DatabaseOptions {
  url: string;
  /** The service's own schema; its tables are found without a prefix. */
  schema: string;
  /** Folder of numbered `NNNN_name.sql` files, applied in order at start. */
  migrationsDir: string;
  /** Pool size. */
  max?: number;
  log: Logger;
  applicationName: string;
}

/**
 * Connects to the service's database, creating the database when it is missing, and applies the
 * service's migrations. Money is bigint end to end: int8 columns arrive as JavaScript bigint.
 */
export async function openDatabase(options: DatabaseOptions): Promise<Sql> {
  await ensureDatabaseExists(options.url, options.log);
  const sql = postgres(options.url, {
    max: options.max ?? 10,
    types: { bigint: postgres.BigInt },
    onnotice: () => {},
    // jit off: every statement here is short and indexed, but the planner's estimates for
    // statements over arrays (unnest) and growing backlogs can pass jit_above_cost, and then
    // compiling the plan took far longer than running it: a delivery claim beside a destination
    // with a large backlog did, every turn (docs/decisions/jit-off.md).
    connection: { application_name: options.applicationName, search_path: options.schema, jit: "off" },
  }) as unknown as Sql;
  await migrate(sql, options.schema, options.migrationsDir, options.log);
  return sql;
}

/** Creates the database named in `url` when it does not exist yet, so a first start needs no manual step. */
export async function ensureDatabaseExists(url: string, log: Logger): Promise<void> {
  const target = new URL(url);
  const name = decodeURIComponent(target.pathname.replace(/^\//, ""));
  if (!name) return;
  const probe = postgres(url, { max: 1, onnotice: () => {}, connect_timeout: 10 });
  try {
    await probe`select 1`;
    return;
  } catch (err) {
    // 3D000: invalid_catalog_name, the database does not exist. Anything else is a real problem.
    if ((err as { code?: string }).code !== "3D000") throw describeConnectionError(err, url);
  } finally {
    await probe.end({ timeout: 1 });
  }
  const admin = new URL(url);
  admin.pathname = "/postgres";
  const adminSql = postgres(admin.toString(), { max: 1, onnotice: () => {} });
  try {
    await adminSql.unsafe(`create database "${name.replace(/"/g, '""')}"`);
    log.info({ database: name }, "created database");
  } catch (err) {
    // 42P04: duplicate_database, another process created it first.
    if ((err as { code?: string }).code !== "42P04") throw describeConnectionError(err, url);
  } finally {
    await adminSql.end({ timeout: 1 });
  }
}

function describeConnectionError(err: unknown, url: string): Error {
  const safe = new URL(url);
  safe.password = safe.password ? "***" : "";
  const message = err instanceof Error ? err.message : String(err);
  return new Error(`cannot use the database at ${safe.toString()}: ${message}`, { cause: err });
}

/**
 * Applies the files of `dir` that the schema has not seen, in order, in one transaction, under an
 * advisory lock so that replicas starting together do not race.
 */
export async function migrate(sql: Sql, schema: string, dir: string, log: Logger): Promise<void> {
  const files = (await readdir(dir)).filter((f) => /^\d{4}_[\w-]+\.sql$/.test(f)).sort();
  await sql.begin(async (tx) => {
    await tx`select pg_advisory_xact_lock(hashtext(${"migrations:" + schema}))`;
    await tx.unsafe(`create schema if not exists "${schema}"`);
    await tx.unsafe(`set local search_path to "${schema}"`);
    await tx`create table if not exists schema_migrations (
      version int primary key, name text not null, applied_at timestamptz not null default now())`;
    // The schema's installation id (`installationOf`), made once like the migrations table.
    await tx`create table if not exists installation (
      id uuid primary key default gen_random_uuid(), created_at timestamptz not null default now(),
      one_row boolean not null default true unique check (one_row))`;
    await tx`insert into installation default values on conflict do nothing`;
    const applied = new Set((await tx<{ version: number }[]>`select version from schema_migrations`).map((r) => r.version));
    for (const file of files) {
      const version = Number(file.slice(0, 4));
      if (applied.has(version)) continue;
      // Migration files are part of the code, never user input: running them as text is safe.
      await tx.unsafe(await readFile(join(dir, file), "utf8"));
      await tx`insert into schema_migrations (version, name) values (${version}, ${file})`;
      log.info({ schema, migration: file }, "applied migration");
    }
  });
}

/**
 * Which installation a service's database belongs to: the random id its schema got once, when it
 * was first migrated (kept by a backup and its restore), with the database's name and server for
 * messages. The event stream records it as the owner of that service's events (nats.ts,
 * `ensureEventStream`), so that the services of another installation, on other databases, are
 * refused the stream instead of taking part of its events.
 */
export interface Installation {
  /** The service's schema: `ledger`, `hold`, `notification`. */
  schema: string;
  id: string;
  /** The database's name, and its server's address when it has one (not over a socket). */
  database: string;
}

/** The installation of `sql`'s schema (the first of its search_path), migrated. */
export async function installationOf(sql: Sql): Promise<Installation> {
  const [row] = await sql<{ id: string; schema: string; database: string; host: string | null; port: number | null }[]>`
    select id::text, current_schema() as schema, current_database() as database,
      host(inet_server_addr()) as host, inet_server_port() as port
    from installation`;
  if (!row) throw new Error("the database has no installation id; its schema was not migrated");
  return { schema: row.schema, id: row.id, database: row.host ? `${row.database} at ${row.host}:${row.port}` : row.database };
}

/** SQLSTATE of a Postgres error, for mapping to domain errors. */
export function sqlState(err: unknown): string | undefined {
  return typeof err === "object" && err !== null && "code" in err ? String((err as { code: unknown }).code) : undefined;
}

/**
 * Postgres answered COMMIT with ROLLBACK: a statement of the transaction had failed (a read whose
 * error its caller caught, say), so nothing of it was kept.
 */
export class TransactionRolledBack extends Error {
  constructor() {
    super("the transaction did not commit: Postgres rolled it back after one of its statements failed");
    this.name = "TransactionRolledBack";
  }
}

/**
 * Whether Postgres itself refused the transaction `err` came from: an ErrorResponse, with a
 * SQLSTATE, or a COMMIT answered with ROLLBACK. Either way it is rolled back for sure. Otherwise
 * (the connection lost, a timeout) it may have committed before the answer went missing.
 */
export function refusedByPostgres(err: unknown): boolean {
  return err instanceof postgres.PostgresError || err instanceof TransactionRolledBack;
}

/**
 * A list for statements that are sent now and awaited later (with a COMMIT, say). Each gets a
 * handler the moment it is pushed: a statement that fails before its awaiter gets to it (the
 * connection lost, a constraint refused while the caller awaits a read) must not count as an
 * unhandled rejection, which ends the process. Its failure still reaches whoever awaits it.
 */
export function sentWrites(): Promise<unknown>[] {
  const writes: Promise<unknown>[] = [];
  const push = writes.push.bind(writes);
  writes.push = (...sent) => {
    for (const write of sent) write.catch(() => {});
    return push(...sent);
  };
  return writes;
}

/**
 * Runs `work` in a transaction on a reserved connection with its statements pipelined, so the
 * transaction waits on Postgres once for its reads and once for its writes with the commit.
 * BEGIN is sent, not awaited: on a healthy connection it cannot fail, on a broken one every
 * statement behind it fails too, and it is awaited before COMMIT is sent. The statements `work`
 * puts in `writes` are sent (`.execute()`) but not awaited; COMMIT follows them at once, and the
 * transaction counts only if every one of them succeeded (after a failed statement Postgres turns
 * COMMIT into ROLLBACK, thrown as `TransactionRolledBack`). Any error rolls back and is thrown.
 */
export async function pipelinedTransaction<T>(sql: Sql, work: (tx: Tx, writes: Promise<unknown>[]) => Promise<T>): Promise<T> {
  const conn = await sql.reserve();
  let open = true;
  try {
    const begun = conn`begin`.execute();
    begun.catch(() => {}); // awaited below; this only keeps a failure from counting as unhandled meanwhile
    // Like BEGIN, each write is awaited below, unless an earlier failure throws first.
    const writes = sentWrites();
    const result = await work(conn as unknown as Tx, writes);
    await begun;
    const committed = conn`commit`.execute();
    const outcome = await Promise.allSettled([...writes, committed]);
    open = false;
    const failed = outcome.find((o): o is PromiseRejectedResult => o.status === "rejected");
    if (failed) throw failed.reason;
    if ((outcome.at(-1) as PromiseFulfilledResult<{ command: string }>).value.command !== "COMMIT") {
      throw new TransactionRolledBack();
    }
    return result;
  } catch (err) {
    if (open) await conn`rollback`.catch(() => {});
    throw err;
  } finally {
    conn.release();
  }
}
