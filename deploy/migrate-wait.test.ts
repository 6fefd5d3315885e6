/**
 * `node dist/migrate.js --wait <schema>`, the init container that holds a service's new pods until
 * the migration Job of their image has applied its migrations: run against a database of its own,
 * it waits while the migrations are missing, ends once they are applied, and gives up with a
 * message naming what is missing when they never are.
 */
import { spawn } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { openDatabase, createLogger } from "@ledger/common";
import postgres from "postgres";
import { afterAll, beforeAll, expect, inject, it } from "vitest";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..");
const database = `migrate_wait_${process.pid}_${Date.now().toString(36)}`;
let url: string;
let admin: postgres.Sql;

beforeAll(async () => {
  const base = new URL(inject("databaseUrl"));
  const adminUrl = new URL(base);
  adminUrl.pathname = "/postgres";
  admin = postgres(adminUrl.toString(), { max: 1, onnotice: () => {} });
  await admin.unsafe(`create database "${database}"`);
  base.pathname = `/${database}`;
  url = base.toString();
});
afterAll(async () => {
  await admin.unsafe(`drop database if exists "${database}" with (force)`);
  await admin.end();
});

function waitFor(schema: string, seconds: number): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ["--import", "tsx", "deploy/migrate.ts", "--wait", schema], {
      cwd: ROOT,
      env: { ...process.env, LEDGER_DATABASE_URL: url, MIGRATE_WAIT_SECONDS: String(seconds), LOG_LEVEL: "info" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let output = "";
    child.stdout.on("data", (c: Buffer) => (output += c.toString()));
    child.stderr.on("data", (c: Buffer) => (output += c.toString()));
    child.on("exit", (code) => resolve({ code, output }));
  });
}

it("gives up, naming the missing migration, when no Job applies them", async () => {
  const { code, output } = await waitFor("ledger", 1);
  expect(code).toBe(1);
  expect(output).toMatch(/ledger: migration \d+ is not applied \(the database has 0\)/);
});

it("waits while the migrations are missing and ends once they are applied", async () => {
  const waiting = waitFor("ledger", 120);
  let ended = false;
  void waiting.then(() => (ended = true));
  await new Promise((resolve) => setTimeout(resolve, 3_000));
  expect(ended).toBe(false);

  const sql = await openDatabase({
    url,
    schema: "ledger",
    migrationsDir: join(ROOT, "services", "ledger", "migrations"),
    max: 1,
    log: createLogger("test", "silent"),
    applicationName: "migrate-wait-test",
  });
  await sql.end({ timeout: 5 });
  const { code, output } = await waiting;
  expect(code).toBe(0);
  expect(output).toContain("migrations of this image are applied");
});

it("refuses a schema it does not know", async () => {
  const { code, output } = await waitFor("ledgr", 1);
  expect(code).toBe(1);
  expect(output).toContain("--wait takes one of ledger, hold, notification");
});
