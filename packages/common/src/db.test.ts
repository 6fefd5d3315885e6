import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { openDatabase, type Sql } from "./db.js";
import { createLogger } from "./logger.js";

describe("openDatabase", () => {
  let dir: string;
  let sql: Sql;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "ledger-db-test-"));
    sql = await openDatabase({
      url: inject("databaseUrl"),
      schema: "db_settings_test",
      migrationsDir: dir,
      max: 2,
      log: createLogger("test", "silent"),
      applicationName: "db-settings-test",
    });
  });
  afterAll(async () => {
    await sql?.end({ timeout: 1 });
    await rm(dir, { recursive: true, force: true });
  });

  it("runs every connection in the service's schema, named, with JIT compilation off", async () => {
    // Each pooled connection gets the settings at startup, not only the first one.
    const rows = await Promise.all(
      [1, 2].map(
        () =>
          sql<{ jit: string; search_path: string; application_name: string }[]>`
            select current_setting('jit') as jit, current_setting('search_path') as search_path,
                   current_setting('application_name') as application_name, pg_sleep(0.05)`,
      ),
    );
    for (const [row] of rows) {
      expect(row).toMatchObject({ jit: "off", search_path: "db_settings_test", application_name: "db-settings-test" });
    }
  });
});
