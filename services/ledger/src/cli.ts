import { parseArgs } from "node:util";
import { fileURLToPath } from "node:url";
import { createLogger, openDatabase, readDatabaseUrl } from "@ledger/common";
import { createAccount } from "./identity.js";

const USAGE = `usage: pnpm ledger accounts create --name NAME [--json]

Creates an account (an API customer) with an API key and a default program in USD.
The API key is printed once and stored only as a hash: keep it.
Uses LEDGER_DATABASE_URL, else DATABASE_URL (default postgres://127.0.0.1:5432/ledger).`;

async function main(argv: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: { name: { type: "string" }, json: { type: "boolean", default: false }, help: { type: "boolean", short: "h" } },
  });
  if (values.help || positionals[0] !== "accounts" || positionals[1] !== "create") {
    console.error(USAGE);
    return values.help ? 0 : 2;
  }
  const name = values.name?.trim();
  if (!name) {
    console.error("--name is required\n\n" + USAGE);
    return 2;
  }
  const log = createLogger("ledger-cli", "warn");
  const sql = await openDatabase({
    url: readDatabaseUrl(process.env, "LEDGER_DATABASE_URL"),
    schema: "ledger",
    migrationsDir: fileURLToPath(new URL("../migrations", import.meta.url)),
    max: 1,
    log,
    applicationName: "ledger-cli",
  });
  try {
    const account = await createAccount(sql, name);
    if (values.json) {
      console.log(JSON.stringify(account));
    } else {
      console.log(`account:  ${account.account_id}\nprogram:  ${account.program_id}\napi key:  ${account.api_key}\n`);
      console.log("The API key is shown only now. Send it as the Authorization header.");
    }
    return 0;
  } finally {
    await sql.end({ timeout: 5 });
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    console.error(`error: ${err instanceof Error ? err.message : String(err)}`);
    process.exit(1);
  },
);
