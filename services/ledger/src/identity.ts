import { createHash, randomBytes } from "node:crypto";
import { newId, type Principal, type Sql, type Tx } from "@ledger/common";
import { insertProgram } from "./programs.js";

/** An account as the CLI prints it: the API key appears here and nowhere else, ever. */
export interface NewAccount {
  account_id: string;
  api_key: string;
  program_id: string;
}

/** SHA-256 of a key: the only form in which keys are stored or compared. */
export function hashApiKey(apiKey: string): Buffer {
  return createHash("sha256").update(apiKey, "utf8").digest();
}

function generateApiKey(): string {
  return "lsk_" + randomBytes(32).toString("base64url");
}

/** Creates an account with one API key and a default program in USD. */
export async function createAccount(sql: Sql, name: string, apiKey = generateApiKey()): Promise<NewAccount> {
  return sql.begin(async (tx) => createAccountIn(tx, name, apiKey));
}

async function createAccountIn(tx: Tx, name: string, apiKey: string): Promise<NewAccount> {
  const accountId = newId("account");
  await tx`insert into accounts (id, name) values (${accountId}, ${name})`;
  await tx`insert into api_keys (id, account_id, key_hash) values (${newId("apiKey")}, ${accountId}, ${hashApiKey(apiKey)})`;
  const program = await insertProgram(tx, { accountId, name: "Default", currencyCode: "USD", isDefault: true });
  return { account_id: accountId, api_key: apiKey, program_id: program.id };
}

/**
 * Makes sure an account answers to `apiKey` (LEDGER_DEV_API_KEY), so a development setup has a
 * known key without a CLI step. Safe when several replicas start at once.
 */
export async function ensureDevAccount(sql: Sql, apiKey: string): Promise<void> {
  await sql.begin(async (tx) => {
    await tx`select pg_advisory_xact_lock(hashtext('ledger:dev-account'))`;
    const [existing] = await tx`select 1 from api_keys where key_hash = ${hashApiKey(apiKey)}`;
    if (!existing) await createAccountIn(tx, "Development", apiKey);
  });
}

/** Resolves a key to its account and default program; null for an unknown or revoked key. */
export async function authenticate(sql: Sql, apiKey: string): Promise<Principal | null> {
  const [row] = await sql<{ account_id: string; program_id: string }[]>`
    select k.account_id, p.id as program_id
    from api_keys k join programs p on p.account_id = k.account_id and p.is_default
    where k.key_hash = ${hashApiKey(apiKey)} and k.revoked_at is null`;
  return row ? { accountId: row.account_id, defaultProgramId: row.program_id } : null;
}

/** The principal of an account, for calls another service makes on its behalf. */
export async function principalOfAccount(sql: Sql, accountId: string): Promise<Principal | null> {
  const [row] = await sql<{ program_id: string }[]>`select id as program_id from programs where account_id = ${accountId} and is_default`;
  return row ? { accountId, defaultProgramId: row.program_id } : null;
}
