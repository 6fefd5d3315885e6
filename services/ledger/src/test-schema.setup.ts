import { fileURLToPath } from "node:url";
import { createLogger, migrate } from "@ledger/common";
import { partitionByHash } from "@ledger/testing";
import postgres from "postgres";
import type { TestProject } from "vitest/node";
import { MONEY_TABLES } from "./money-tables.js";

/** How many partitions each money table gets in the partitioned run. */
export const TEST_PARTITIONS = 4;

/**
 * The schema the ledger's tests run on. With LEDGER_TEST_SCHEMA=partitioned (the partitioned run,
 * vitest.partitioned.config.ts), the run's database gets the ledger's schema migrated and then its
 * money tables recreated partitioned by hash of account_id, before any test starts a ledger (which
 * then finds every migration applied). Postgres refuses a partitioned table whose primary key or a
 * unique index leaves out account_id, as a distributed Postgres (Citus) does, so the run proves the
 * keys; and every test of the run then reads and writes across partitions as it would across shards.
 * Unset, nothing happens: the tests migrate a plain schema themselves.
 */
export default async function setup(project: TestProject): Promise<void> {
  const mode = process.env["LEDGER_TEST_SCHEMA"];
  if (mode === undefined || mode === "" || mode === "plain") return;
  if (mode !== "partitioned") throw new Error(`LEDGER_TEST_SCHEMA must be "plain" or "partitioned", not ${JSON.stringify(mode)}`);
  const sql = postgres(project.getProvidedContext().databaseUrl, { max: 1, onnotice: () => {}, connection: { search_path: "ledger" } });
  try {
    const log = createLogger("partitioned-schema", "silent");
    await migrate(sql as never, "ledger", fileURLToPath(new URL("../migrations", import.meta.url)), log);
    await partitionByHash(sql, { schema: "ledger", tables: MONEY_TABLES, column: "account_id", partitions: TEST_PARTITIONS });
    // The run must not pass on plain tables: every money table is partitioned, into that many.
    const tables = await sql<{ name: string; partitions: number }[]>`
      select c.relname as name, (select count(*)::int from pg_inherits i where i.inhparent = c.oid) as partitions
      from pg_class c join pg_namespace n on n.oid = c.relnamespace
      where n.nspname = 'ledger' and c.relkind = 'p' and c.relname = any(${[...MONEY_TABLES]})`;
    const partitioned = tables.filter((t) => t.partitions === TEST_PARTITIONS).map((t) => t.name);
    if (partitioned.length !== MONEY_TABLES.length) {
      throw new Error(`partitioned run: only ${partitioned.join(", ")} of ${MONEY_TABLES.join(", ")} are partitioned`);
    }
  } finally {
    await sql.end({ timeout: 2 });
  }
}
