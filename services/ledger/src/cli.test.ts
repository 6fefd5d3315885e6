import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { afterAll, beforeAll, expect, it } from "vitest";
import { inject } from "vitest";
import { restClient, startStack, type Stack } from "@ledger/e2e";

// `pnpm -s ledger accounts create --name NAME --json` prints a key that works against the API, and
// the command as the README writes it prints nothing but that JSON on stdout.

const run = promisify(execFile);
const CLI = fileURLToPath(new URL("./cli.ts", import.meta.url));
const TSX = fileURLToPath(new URL("../../../node_modules/.bin/tsx", import.meta.url));
const ROOT = fileURLToPath(new URL("../../../", import.meta.url));

let stack: Stack;
beforeAll(async () => {
  stack = await startStack();
});
afterAll(async () => stack?.close());

it("creates an account whose key and default program work through the gateway", async () => {
  const { stdout } = await run(TSX, [CLI, "accounts", "create", "--name", "Acme", "--json"], {
    env: { ...process.env, DATABASE_URL: inject("databaseUrl") },
  });
  const account = JSON.parse(stdout);
  expect(Object.keys(account).sort()).toEqual(["account_id", "api_key", "program_id"]);
  expect(account.account_id).toMatch(/^acct_/);
  expect(account.program_id).toMatch(/^prg_/);
  const api = restClient(stack.restUrl, account.api_key);
  const program = await api.get("/program");
  expect(program.status).toBe(200);
  expect(program.body.program.program_id).toBe(account.program_id);
  const [stored] = await stack.sql<{ n: bigint }[]>`
    select count(*)::int8 as n from api_keys where key_hash = sha256(convert_to(${account.api_key}, 'UTF8'))`;
  expect(stored!.n).toBe(1n);
  const [plain] = await stack.sql<{ n: bigint }[]>`
    select count(*)::int8 as n from api_keys where encode(key_hash, 'escape') like ${"%" + account.api_key.slice(4, 20) + "%"}`;
  expect(plain!.n).toBe(0n);
});

it("explains its usage and fails without a name", async () => {
  await expect(
    run(TSX, [CLI, "accounts", "create"], { env: { ...process.env, DATABASE_URL: inject("databaseUrl") } }),
  ).rejects.toMatchObject({
    stderr: expect.stringContaining("--name is required"),
  });
});

/** The one line of `markdown` (a doc's fenced shell) that starts the account-creating command. */
function documentedCreate(markdown: string): string | undefined {
  return markdown
    .split("\n")
    .map((line) => line.replace(/\s+#.*$/, "").trim())
    .find((line) => /^pnpm .*ledger accounts create .*--json$/.test(line));
}

it("prints only JSON on stdout when run exactly as the README and operations.md write it", async () => {
  const readme = documentedCreate(readFileSync(`${ROOT}README.md`, "utf8"));
  const operations = documentedCreate(readFileSync(`${ROOT}docs/operations.md`, "utf8"));
  expect(readme).toBeDefined();
  expect(operations).toBe(readme);
  // Through a shell from the repository's root, as a reader pastes it: pnpm's own lines
  // ("> ledger@ ledger ...") on stdout would break a script that parses the output.
  const { stdout } = await run("sh", ["-c", readme!], {
    cwd: ROOT,
    env: { ...process.env, DATABASE_URL: inject("databaseUrl") },
  });
  const account = JSON.parse(stdout);
  expect(account.api_key).toMatch(/^lsk_/);
  expect(account.account_id).toMatch(/^acct_/);
});
