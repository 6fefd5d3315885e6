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

const GENERATED_KEY = /^lsk_[A-Za-z0-9_-]{43}$/;

function generateApiKey(): string {
  return "lsk_" + randomBytes(32).toString("base64url");
}

/**
 * What a key list shows of a key: `lsk_` and its first 8 random characters (48 of its 256 bits),
 * enough to tell keys apart, far too little to use. A key not made here (LEDGER_DEV_API_KEY) has
 * none: its first characters could be much of it.
 */
export function apiKeyPrefix(apiKey: string): string | null {
  return GENERATED_KEY.test(apiKey) ? apiKey.slice(0, 12) : null;
}

async function insertApiKey(tx: Tx | Sql, accountId: string, apiKey: string): Promise<string> {
  const keyId = newId("apiKey");
  await tx`insert into api_keys (id, account_id, key_hash, prefix) values (${keyId}, ${accountId}, ${hashApiKey(apiKey)}, ${apiKeyPrefix(apiKey)})`;
  return keyId;
}

/** Creates an account with one API key and a default program in USD. */
export async function createAccount(sql: Sql, name: string, apiKey = generateApiKey()): Promise<NewAccount> {
  return sql.begin(async (tx) => createAccountIn(tx, name, apiKey));
}

async function createAccountIn(tx: Tx, name: string, apiKey: string): Promise<NewAccount> {
  const accountId = newId("account");
  await tx`insert into accounts (id, name) values (${accountId}, ${name})`;
  await insertApiKey(tx, accountId, apiKey);
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
  const [row] = await sql<{ key_id: string; account_id: string; program_id: string }[]>`
    select k.id as key_id, k.account_id, p.id as program_id
    from api_keys k join programs p on p.account_id = k.account_id and p.is_default
    where k.key_hash = ${hashApiKey(apiKey)} and k.revoked_at is null`;
  return row ? { accountId: row.account_id, defaultProgramId: row.program_id, apiKeyId: row.key_id } : null;
}

/** The principal of an account, for calls another service makes on its behalf. */
export async function principalOfAccount(sql: Sql, accountId: string): Promise<Principal | null> {
  const [row] = await sql<{ program_id: string }[]>`select id as program_id from programs where account_id = ${accountId} and is_default`;
  return row ? { accountId, defaultProgramId: row.program_id } : null;
}

/** An account as `pnpm ledger accounts list` shows it. */
export interface AccountSummary {
  account_id: string;
  name: string;
  default_program_id: string | null;
  active_keys: number;
  created_at: string;
}

/** Accounts in creation order, `limit` at most, after `after` (an account id) when given. */
export async function listAccounts(sql: Sql, page: { limit: number; after?: string }): Promise<AccountSummary[]> {
  const rows = await sql<{ id: string; name: string; program_id: string | null; active_keys: number; created_at: Date }[]>`
    select a.id, a.name, a.created_at,
      (select p.id from programs p where p.account_id = a.id and p.is_default) as program_id,
      (select count(*)::int4 from api_keys k where k.account_id = a.id and k.revoked_at is null) as active_keys
    from accounts a
    ${page.after ? sql`where a.id > ${page.after}` : sql``}
    order by a.id limit ${page.limit}`;
  return rows.map((r) => ({
    account_id: r.id,
    name: r.name,
    default_program_id: r.program_id,
    active_keys: r.active_keys,
    created_at: r.created_at.toISOString(),
  }));
}

/** A new key of an account, as `keys create` prints it: the key appears here and nowhere else, ever. */
export interface NewApiKey {
  key_id: string;
  api_key: string;
}

/** Gives an existing account one more API key; null when there is no such account. */
export async function createApiKey(sql: Sql, accountId: string): Promise<NewApiKey | null> {
  return sql.begin(async (tx) => {
    const [account] = await tx`select 1 from accounts where id = ${accountId} for key share`;
    if (!account) return null;
    const apiKey = generateApiKey();
    return { key_id: await insertApiKey(tx, accountId, apiKey), api_key: apiKey };
  });
}

/** A key as `keys list` shows it: never the key, only what tells it apart and its history. */
export interface ApiKeySummary {
  key_id: string;
  prefix: string | null;
  created_at: string;
  last_used_at: string | null;
  revoked_at: string | null;
}

/** An account's keys, oldest first; null when there is no such account. */
export async function listApiKeys(sql: Sql, accountId: string): Promise<ApiKeySummary[] | null> {
  const [account] = await sql`select 1 from accounts where id = ${accountId}`;
  if (!account) return null;
  const rows = await sql<{ id: string; prefix: string | null; created_at: Date; last_used_at: Date | null; revoked_at: Date | null }[]>`
    select id, prefix, created_at, last_used_at, revoked_at from api_keys where account_id = ${accountId} order by id`;
  return rows.map(keySummary);
}

function keySummary(r: {
  id: string;
  prefix: string | null;
  created_at: Date;
  last_used_at: Date | null;
  revoked_at: Date | null;
}): ApiKeySummary {
  return {
    key_id: r.id,
    prefix: r.prefix,
    created_at: r.created_at.toISOString(),
    last_used_at: r.last_used_at?.toISOString() ?? null,
    revoked_at: r.revoked_at?.toISOString() ?? null,
  };
}

/**
 * Revokes a key: from then on it authenticates nothing (caches let it through for a few seconds
 * more; docs/operations.md#api-keys). Revoking a revoked key changes nothing and says when it was.
 * Null when there is no such key.
 */
export async function revokeApiKey(sql: Sql, keyId: string): Promise<{ key: ApiKeySummary; alreadyRevoked: boolean } | null> {
  const [revoked] = await sql<
    { id: string; prefix: string | null; created_at: Date; last_used_at: Date | null; revoked_at: Date | null }[]
  >`
    update api_keys set revoked_at = now() where id = ${keyId} and revoked_at is null
    returning id, prefix, created_at, last_used_at, revoked_at`;
  if (revoked) return { key: keySummary(revoked), alreadyRevoked: false };
  const [existing] = await sql<
    { id: string; prefix: string | null; created_at: Date; last_used_at: Date | null; revoked_at: Date | null }[]
  >`
    select id, prefix, created_at, last_used_at, revoked_at from api_keys where id = ${keyId}`;
  return existing ? { key: keySummary(existing), alreadyRevoked: true } : null;
}
