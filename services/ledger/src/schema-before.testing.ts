import { randomBytes } from "node:crypto";
import { copyFile, mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { createLogger, migrate, type Sql } from "@ledger/common";
import postgres from "postgres";

const MIGRATIONS = fileURLToPath(new URL("../migrations", import.meta.url));
const log = createLogger("migration-test", "silent");

/** A schema of its own holding the ledger as a previous version left it, for a migration's test. */
export interface SchemaBefore {
  sql: Sql;
  schema: string;
  /** Runs every migration the schema does not have yet, as the next deployment would. */
  migrateRest(): Promise<void>;
  /** Drops the schema and the copied migrations. */
  close(): Promise<void>;
}

/**
 * A new schema migrated with every migration whose file name sorts before `version` (for example
 * "0014"): the database a deployment of the previous version leaves, for a test to fill with data
 * and then migrate the rest of the way.
 */
export async function schemaBefore(databaseUrl: string, version: string, name: string): Promise<SchemaBefore> {
  const schema = `${name}_${randomBytes(4).toString("hex")}`;
  const sql = postgres(databaseUrl, {
    max: 2,
    types: { bigint: postgres.BigInt },
    onnotice: () => {},
    connection: { search_path: schema },
  }) as unknown as Sql;
  const dir = await mkdtemp(join(tmpdir(), `${name}-`));
  for (const file of await readdir(MIGRATIONS)) if (file < version) await copyFile(join(MIGRATIONS, file), join(dir, file));
  await migrate(sql, schema, dir, log);
  return {
    sql,
    schema,
    migrateRest: () => migrate(sql, schema, MIGRATIONS, log),
    async close() {
      await sql.unsafe(`drop schema if exists "${schema}" cascade`);
      await sql.end({ timeout: 2 });
      await rm(dir, { recursive: true });
    },
  };
}
