// For `pnpm start` on a laptop: when no database was named and nothing answers at the default one,
// run PostgreSQL embedded in this process (PGlite, Postgres compiled to WebAssembly) with its data
// in a local folder, and serve it on loopback so the services connect to it as to any server.
import { closeSync, mkdirSync, openSync, readFileSync, rmSync, writeSync } from "node:fs";
import { resolve } from "node:path";
import { PGlite } from "@electric-sql/pglite";
import { pg_trgm } from "@electric-sql/pglite/contrib/pg_trgm";
import { ConfigError, DEFAULT_DATABASE_URL, envBool, envInt, envOptional } from "@ledger/common";
import { servePglite } from "./pglite-server.js";
import { probe } from "./reachable.js";

/** Where the services' database is, and how to stop it when this process runs it. */
export type DatabaseChoice = { embedded: false; url: string } | { embedded: true; url: string; dataDir: string; close(): Promise<void> };

function hostAndPort(url: string): { host: string; port: number } {
  const parsed = new URL(url);
  return { host: parsed.hostname.replace(/^\[|\]$/g, ""), port: Number(parsed.port || 5432) };
}

/** What `pnpm start` decided about its database, before starting anything. */
export type DatabaseDecision = { embedded: false; url: string } | { embedded: true; why: string };

/**
 * Decides which database `pnpm start` uses (docs/operations.md#without-servers-the-embedded-database-and-a-local-nats):
 * - DATABASE_URL set: that server, or a stop with a message naming the variable when nothing answers
 *   there; never a silent fallback, which would hide the data the user meant to use.
 * - LEDGER_EMBEDDED_POSTGRES=true: the embedded database, whatever answers on 5432.
 * - Neither: the default server (`defaultUrl`, 127.0.0.1:5432) when it answers, else the embedded
 *   database, unless LEDGER_EMBEDDED_POSTGRES=false. One probe of at most a second decides.
 */
export async function decideDatabase(
  env: Record<string, string | undefined>,
  dataRoot: string,
  defaultUrl = DEFAULT_DATABASE_URL,
): Promise<DatabaseDecision> {
  const explicit = envOptional(env, "DATABASE_URL");
  const forced =
    env["LEDGER_EMBEDDED_POSTGRES"] === undefined || env["LEDGER_EMBEDDED_POSTGRES"] === ""
      ? undefined
      : envBool(env, "LEDGER_EMBEDDED_POSTGRES", false);
  if (explicit && forced) {
    throw new ConfigError("LEDGER_EMBEDDED_POSTGRES", "is true and DATABASE_URL is set too: unset one of them");
  }
  if (explicit) {
    const { host, port } = hostAndPort(explicit);
    const answer = await probe(host, port);
    if (!answer.reachable) {
      throw new ConfigError(
        "DATABASE_URL",
        `names a server at ${host}:${port} and nothing answers there (${answer.reason}): start that server, or unset DATABASE_URL ` +
          `to run on the embedded database (PGlite) with its data in ${resolve(dataRoot, "pglite")}`,
      );
    }
    return { embedded: false, url: explicit };
  }
  if (forced === true) return { embedded: true, why: "LEDGER_EMBEDDED_POSTGRES=true" };
  const { host, port } = hostAndPort(defaultUrl);
  const answer = await probe(host, port);
  if (answer.reachable) return { embedded: false, url: defaultUrl };
  if (forced === false) {
    throw new ConfigError(
      "LEDGER_EMBEDDED_POSTGRES",
      `is false and no PostgreSQL answers at ${host}:${port} (${answer.reason}): start one, or set DATABASE_URL`,
    );
  }
  return { embedded: true, why: `PostgreSQL at ${host}:${port} not reachable (${answer.reason})` };
}

/** The database `pnpm start` uses: the decision above, with the embedded one started when chosen. */
export async function chooseDatabase(env: Record<string, string | undefined>, dataRoot: string): Promise<DatabaseChoice> {
  const decision = await decideDatabase(env, dataRoot);
  if (!decision.embedded) return decision;
  const dataDir = resolve(dataRoot, "pglite");
  // Said before PGlite loads (a second or two): what was found, and what happens instead.
  console.error(`${decision.why}: starting the embedded one (PGlite, data in ${dataDir}).`);
  const port = envInt(env, "LEDGER_EMBEDDED_POSTGRES_PORT", 0, 0, 65535);
  const embedded = await startEmbeddedPostgres({ dataDir, host: "127.0.0.1", port });
  console.error(
    `Database: embedded PostgreSQL (PGlite), served at ${embedded.url} while this runs ` +
      `(for pnpm -s ledger, set DATABASE_URL to it); to use a real server instead, set DATABASE_URL (e.g. ${DEFAULT_DATABASE_URL}).`,
  );
  return { embedded: true, url: embedded.url, dataDir, close: embedded.close };
}

/** A running embedded database. */
export interface EmbeddedPostgres {
  /** A URL for postgres.js and psql; every database name reaches the one embedded database. */
  url: string;
  close(): Promise<void>;
}

/**
 * Opens (creating on first use) a PGlite database in `dataDir` and serves it on `host:port`.
 * PGlite has no lock of its own on its folder and two processes writing one would corrupt it, so a
 * lock file beside the folder refuses a second start while the first one lives.
 */
export async function startEmbeddedPostgres(options: { dataDir: string; host: string; port: number }): Promise<EmbeddedPostgres> {
  mkdirSync(options.dataDir, { recursive: true });
  const releaseLock = lockFolder(`${options.dataDir}.lock`);
  let db: PGlite | undefined;
  try {
    // pg_trgm: the ledger's entity name search is indexed by it (its migration 0015 creates it).
    db = await PGlite.create({ dataDir: options.dataDir, extensions: { pg_trgm } });
    const server = await servePglite(db, { host: options.host, port: options.port });
    const opened = db;
    return {
      url: `postgres://postgres@${options.host}:${server.port}/ledger`,
      async close() {
        await server.close();
        // A clean shutdown: Postgres checkpoints, so the next start needs no recovery.
        await opened.close();
        releaseLock();
      },
    };
  } catch (err) {
    await db?.close().catch(() => {});
    releaseLock();
    throw err;
  }
}

function lockFolder(lockPath: string): () => void {
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      const fd = openSync(lockPath, "wx");
      writeSync(fd, String(process.pid));
      closeSync(fd);
      return () => rmSync(lockPath, { force: true });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
      const holder = Number(readFileSync(lockPath, "utf8").trim());
      if (holder && alive(holder)) {
        throw new Error(
          `the embedded database in ${lockPath.replace(/\.lock$/, "")} is in use by process ${holder}; stop it first, or set LEDGER_DATA_DIR to another folder`,
        );
      }
      // Left by a process that died without cleaning up: take it over.
      rmSync(lockPath, { force: true });
    }
  }
  throw new Error(`cannot lock ${lockPath}`);
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}
