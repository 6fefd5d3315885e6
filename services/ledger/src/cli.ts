import { parseArgs } from "node:util";
import { fileURLToPath } from "node:url";
import { createLogger, isId, openDatabase, readDatabaseUrl, type Sql } from "@ledger/common";
import {
  createAccount,
  createApiKey,
  listAccounts,
  listApiKeys,
  revokeApiKey,
  type AccountSummary,
  type ApiKeySummary,
} from "./identity.js";

const USAGE = `usage: pnpm -s ledger <command> [options]
       node dist/ledger-cli.js <command> [options]   (the compiled CLI, as in the container image)

Commands:
  accounts create --name NAME [--json]
      Creates an account (an API customer) with an API key and a default program in USD.
  accounts list [--limit N] [--after ACCOUNT_ID] [--json]
      Lists accounts in creation order, N at a time (default 100, at most 1000).
  keys create --account ACCOUNT_ID [--json]
      Gives the account one more API key.
  keys list --account ACCOUNT_ID [--json]
      Lists the account's keys: id, prefix, created, last used, revoked. Never a key itself.
  keys revoke KEY_ID [--json]
      Revokes a key. Within 5 seconds it answers 401 on every port of every service.

An API key is printed once, when it is created, and stored only as a hash: keep it.
Last used times are written about once a minute, not on every request.

Options:
  --json      print JSON on stdout instead of text
  -h, --help  print this help

Exit status: 0 done, 1 failed (no such account or key, database unreachable), 2 bad usage.
Uses LEDGER_DATABASE_URL, else DATABASE_URL (default postgres://127.0.0.1:5432/ledger).`;

const MAX_ACCOUNTS_PAGE = 1_000;

/** A mistake in the command line: printed with the usage, exit status 2. */
class UsageError extends Error {}

/** A command that could not be done (no such account or key): printed as is, exit status 1. */
class Failure extends Error {}

interface Options {
  json: boolean;
  name?: string | undefined;
  account?: string | undefined;
  limit?: string | undefined;
  after?: string | undefined;
}

/** Checks a command's arguments (a mistake throws UsageError before any connection) and returns its work. */
type Command = (options: Options, args: string[]) => (sql: Sql) => Promise<void>;

function required(value: string | undefined, flag: string): string {
  const trimmed = value?.trim();
  if (!trimmed) throw new UsageError(`${flag} is required`);
  return trimmed;
}

function accountIdOf(value: string | undefined): string {
  const accountId = required(value, "--account");
  if (!isId("account", accountId)) throw new UsageError(`${JSON.stringify(accountId)} is not an account id (acct_ and 26 characters)`);
  return accountId;
}

function print(options: Options, json: unknown, text: string): void {
  console.log(options.json ? JSON.stringify(json) : text);
}

/** A table with a header row, columns padded to their widest cell. */
function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  return [header, ...rows]
    .map((cells) =>
      cells
        .map((c, i) => c.padEnd(widths[i]!))
        .join("  ")
        .trimEnd(),
    )
    .join("\n");
}

const commands: Record<string, Command> = {
  "accounts create"(options) {
    const name = required(options.name, "--name");
    return async (sql) => {
      const account = await createAccount(sql, name);
      print(
        options,
        account,
        `account:  ${account.account_id}\nprogram:  ${account.program_id}\napi key:  ${account.api_key}\n\n` +
          "The API key is shown only now. Send it as the Authorization header.",
      );
    };
  },

  "accounts list"(options) {
    const limit = options.limit === undefined ? 100 : Number(options.limit);
    if (!Number.isInteger(limit) || limit < 1 || limit > MAX_ACCOUNTS_PAGE)
      throw new UsageError(`--limit must be an integer from 1 to ${MAX_ACCOUNTS_PAGE}`);
    if (options.after !== undefined && !isId("account", options.after)) throw new UsageError("--after must be an account id");
    return async (sql) => {
      // One more than asked tells whether there is a next page.
      const found = await listAccounts(sql, { limit: limit + 1, ...(options.after ? { after: options.after } : {}) });
      const accounts = found.slice(0, limit);
      const nextAfter = found.length > limit ? accounts.at(-1)!.account_id : null;
      const rows = accounts.map((a: AccountSummary) => [
        a.account_id,
        a.name,
        a.default_program_id ?? "-",
        String(a.active_keys),
        a.created_at,
      ]);
      const text = accounts.length === 0 ? "no accounts" : table(["ACCOUNT", "NAME", "DEFAULT PROGRAM", "ACTIVE KEYS", "CREATED"], rows);
      print(
        options,
        { accounts, next_after: nextAfter },
        nextAfter ? `${text}\n\nmore: pnpm -s ledger accounts list --after ${nextAfter}` : text,
      );
    };
  },

  "keys create"(options) {
    const accountId = accountIdOf(options.account);
    return async (sql) => {
      const key = await createApiKey(sql, accountId);
      if (!key) throw new Failure(`no account ${accountId}`);
      print(
        options,
        key,
        `key:      ${key.key_id}\napi key:  ${key.api_key}\n\nThe API key is shown only now. Send it as the Authorization header.`,
      );
    };
  },

  "keys list"(options) {
    const accountId = accountIdOf(options.account);
    return async (sql) => {
      const keys = await listApiKeys(sql, accountId);
      if (!keys) throw new Failure(`no account ${accountId}`);
      const rows = keys.map((k: ApiKeySummary) => [
        k.key_id,
        k.prefix ? `${k.prefix}…` : "-",
        k.created_at,
        k.last_used_at ?? "never",
        k.revoked_at ?? "-",
      ]);
      print(options, { keys }, keys.length === 0 ? "no keys" : table(["KEY", "PREFIX", "CREATED", "LAST USED", "REVOKED"], rows));
    };
  },

  "keys revoke"(options, args) {
    if (args.length !== 1) throw new UsageError("keys revoke takes one KEY_ID");
    const keyId = args[0]!;
    if (!isId("apiKey", keyId)) throw new UsageError(`${JSON.stringify(keyId)} is not a key id (key_ and 26 characters)`);
    return async (sql) => {
      const result = await revokeApiKey(sql, keyId);
      if (!result) throw new Failure(`no key ${keyId}`);
      const text = result.alreadyRevoked
        ? `key ${keyId} was already revoked at ${result.key.revoked_at}`
        : `revoked key ${keyId}; within 5 seconds it answers 401 everywhere`;
      print(options, result.key, text);
    };
  },
};

async function main(argv: string[]): Promise<number> {
  let options: Options & { help?: boolean | undefined };
  let positionals: string[];
  try {
    const parsed = parseArgs({
      args: argv,
      allowPositionals: true,
      options: {
        name: { type: "string" },
        account: { type: "string" },
        limit: { type: "string" },
        after: { type: "string" },
        json: { type: "boolean", default: false },
        help: { type: "boolean", short: "h" },
      },
    });
    options = Object.assign({}, parsed.values, { json: parsed.values.json ?? false });
    positionals = parsed.positionals;
  } catch (err) {
    console.error(`${(err as Error).message}\n\n${USAGE}`);
    return 2;
  }
  if (options.help) {
    console.log(USAGE);
    return 0;
  }
  const command = commands[positionals.slice(0, 2).join(" ")];
  if (!command) {
    console.error(positionals.length === 0 ? USAGE : `unknown command: ${positionals.join(" ")}\n\n${USAGE}`);
    return 2;
  }
  let work: (sql: Sql) => Promise<void>;
  try {
    const args = positionals.slice(2);
    if (args.length > 0 && command !== commands["keys revoke"]) throw new UsageError(`unexpected argument: ${args.join(" ")}`);
    work = command(options, args);
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    console.error(`${err.message}\n\n${USAGE}`);
    return 2;
  }
  const log = createLogger("ledger-cli", "warn");
  let sql: Sql | undefined;
  try {
    sql = await openDatabase({
      url: readDatabaseUrl(process.env, "LEDGER_DATABASE_URL"),
      schema: "ledger",
      migrationsDir: fileURLToPath(new URL("../migrations", import.meta.url)),
      max: 1,
      log,
      applicationName: "ledger-cli",
    });
    await work(sql);
    return 0;
  } catch (err) {
    console.error(`error: ${err instanceof Error ? err.message : String(err)}`);
    return 1;
  } finally {
    await sql?.end({ timeout: 5 });
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    console.error(`error: ${err instanceof Error ? err.message : String(err)}`);
    process.exit(1);
  },
);
