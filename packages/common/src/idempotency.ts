import { createHash } from "node:crypto";
import { create, fromBinary, toBinary, type DescMessage, type MessageInitShape, type MessageShape } from "@bufbuild/protobuf";
import type { HandlerContext } from "@connectrpc/connect";
import type { Logger } from "pino";
import type { Sql, Tx } from "./db.js";
import { invalidArgument, ruleViolation } from "./errors.js";

/** Header that carries the key, on REST and on RPC alike. */
export const IDEMPOTENCY_KEY_HEADER = "idempotency-key";
/** Response header set when a stored response is replayed. */
export const IDEMPOTENT_REPLAYED_HEADER = "idempotent-replayed";
/** How long a key is remembered (DESIGN.md section 5). */
export const IDEMPOTENCY_WINDOW_HOURS = 24;

/** The key of a call, validated, or undefined when the caller sent none. */
export function idempotencyKeyOf(ctx: HandlerContext): string | undefined {
  const key = ctx.requestHeader.get(IDEMPOTENCY_KEY_HEADER);
  if (key === null) return undefined;
  if (key.length < 1 || key.length > 255) throw invalidArgument("Idempotency-Key must be 1 to 255 characters");
  return key;
}

/**
 * A fingerprint of what was asked: the method and the request message. The same JSON body always
 * makes the same message and so the same hash; any changed field makes another.
 */
export function requestFingerprint<I extends DescMessage>(method: string, schema: I, request: MessageShape<I>): Buffer {
  return createHash("sha256").update(method).update("\0").update(toBinary(schema, request)).digest();
}

/** What a claim found. */
export type Claim = { kind: "new" } | { kind: "replay"; response: Uint8Array };

/**
 * Claims `key` inside the caller's transaction. If another transaction holds the same key, this
 * waits for it: when it commits, its response is replayed; when it rolls back, the key is ours.
 * Each service has an `idempotency_keys` table in its own schema.
 */
export async function claimIdempotencyKey(tx: Tx, accountId: string, key: string, fingerprint: Buffer): Promise<Claim> {
  const inserted = await tx`
    insert into idempotency_keys (account_id, key, fingerprint)
    values (${accountId}, ${key}, ${fingerprint})
    on conflict (account_id, key) do nothing
    returning 1`;
  if (inserted.length === 1) return { kind: "new" };
  const [existing] = await tx<{ fingerprint: Buffer; response: Uint8Array | null; expired: boolean }[]>`
    select fingerprint, response,
           created_at < now() - make_interval(hours => ${IDEMPOTENCY_WINDOW_HOURS}) as expired
    from idempotency_keys where account_id = ${accountId} and key = ${key} for update`;
  if (!existing || existing.expired) {
    // A key older than the window is forgotten: the request is new again.
    await tx`
      insert into idempotency_keys (account_id, key, fingerprint) values (${accountId}, ${key}, ${fingerprint})
      on conflict (account_id, key) do update set fingerprint = excluded.fingerprint, response = null, created_at = now()`;
    return { kind: "new" };
  }
  if (!Buffer.from(existing.fingerprint).equals(fingerprint)) {
    throw ruleViolation("idempotency_conflict", "this Idempotency-Key was already used with a different request");
  }
  if (!existing.response) {
    // Only a committed claim is visible, and every committed claim stores its response.
    throw new Error("idempotency key committed without a response");
  }
  return { kind: "replay", response: existing.response };
}

/** One key of a batch to claim, as `claimIdempotencyKey` takes it. */
export interface KeyClaim {
  accountId: string;
  key: string;
  fingerprint: Buffer;
}

/**
 * Claims many keys in the caller's transaction: one statement inserts every new key (the usual
 * case), and only keys that exist already are looked at one by one, as `claimIdempotencyKey` does.
 * Callers pass the keys sorted; the insert takes them in that order and rows that exist are locked
 * only after every insert, so two batches with overlapping keys cannot wait on each other in a cycle.
 * Each claim answers with its own result or its own error.
 */
export async function claimIdempotencyKeys(tx: Tx, claims: KeyClaim[]): Promise<Array<Claim | Error>> {
  if (claims.length === 0) return [];
  const inserted = await tx<{ account_id: string; key: string }[]>`
    insert into idempotency_keys (account_id, key, fingerprint)
    select c.account_id, c.key, decode(c.fingerprint, 'hex')
    from unnest(${claims.map((c) => c.accountId)}::text[], ${claims.map((c) => c.key)}::text[],
                ${claims.map((c) => c.fingerprint.toString("hex"))}::text[]) with ordinality as c(account_id, key, fingerprint, n)
    order by c.n
    on conflict (account_id, key) do nothing
    returning account_id, key`;
  const fresh = new Set(inserted.map((row) => `${row.account_id}\u0000${row.key}`));
  const results: Array<Claim | Error> = [];
  for (const claim of claims) {
    if (fresh.has(`${claim.accountId}\u0000${claim.key}`)) {
      results.push({ kind: "new" });
      continue;
    }
    try {
      results.push(await claimIdempotencyKey(tx, claim.accountId, claim.key, claim.fingerprint));
    } catch (err) {
      results.push(err instanceof Error ? err : new Error(String(err)));
    }
  }
  return results;
}

/**
 * Stores the responses of claimed keys and forgets the claims of refused requests, in one
 * statement each, in the same transaction as the effects. The statements are sent, not awaited:
 * the caller awaits them with its commit, so they cost no round trip of their own.
 */
export function settleIdempotencyKeys(
  tx: Tx,
  completed: Array<{ accountId: string; key: string; response: Uint8Array }>,
  refused: Array<{ accountId: string; key: string }>,
): Promise<unknown>[] {
  const writes: Promise<unknown>[] = [];
  if (completed.length > 0) {
    writes.push(tx`
      update idempotency_keys k set response = decode(v.response, 'hex')
      from unnest(${completed.map((c) => c.accountId)}::text[], ${completed.map((c) => c.key)}::text[],
                  ${completed.map((c) => Buffer.from(c.response).toString("hex"))}::text[]) as v(account_id, key, response)
      where k.account_id = v.account_id and k.key = v.key`.execute());
  }
  if (refused.length > 0) {
    // A refused request stores nothing: its claim goes, so a retry with the key is tried afresh.
    writes.push(tx`
      delete from idempotency_keys k
      using unnest(${refused.map((c) => c.accountId)}::text[], ${refused.map((c) => c.key)}::text[]) as v(account_id, key)
      where k.account_id = v.account_id and k.key = v.key`.execute());
  }
  return writes;
}

/** Stores the response of a claimed key, in the same transaction as the effect. */
export async function completeIdempotencyKey(tx: Tx, accountId: string, key: string, response: Uint8Array): Promise<void> {
  await tx`update idempotency_keys set response = ${response} where account_id = ${accountId} and key = ${key}`;
}

/**
 * Runs `effect` in `begin`'s transaction, once per key: a repeat of the same request replays the
 * stored response (and sets `idempotent-replayed`), a different request with the key is refused.
 * Only successful responses are stored, because a failure rolls the claim back with the effect.
 */
export async function runIdempotent<I extends DescMessage, O extends DescMessage>(args: {
  ctx: HandlerContext;
  begin: <T>(fn: (tx: Tx) => Promise<T>) => Promise<T>;
  accountId: string;
  requestSchema: I;
  request: MessageShape<I>;
  responseSchema: O;
  effect: (tx: Tx) => Promise<MessageInitShape<O>>;
}): Promise<MessageShape<O>> {
  const { ctx, accountId, responseSchema } = args;
  const key = idempotencyKeyOf(ctx);
  if (key === undefined) return args.begin(async (tx) => create(responseSchema, await args.effect(tx)));
  const fingerprint = requestFingerprint(`${ctx.service.typeName}/${ctx.method.name}`, args.requestSchema, args.request);
  return args.begin(async (tx) => {
    const claim = await claimIdempotencyKey(tx, accountId, key, fingerprint);
    if (claim.kind === "replay") {
      ctx.responseHeader.set(IDEMPOTENT_REPLAYED_HEADER, "true");
      return fromBinary(responseSchema, claim.response);
    }
    const response = create(responseSchema, await args.effect(tx));
    await completeIdempotencyKey(tx, accountId, key, toBinary(responseSchema, response));
    return response;
  });
}

/**
 * Deletes keys past the window every ten minutes (they only take space); returns the stop function.
 * Each service with an `idempotency_keys` table runs one.
 */
export function startIdempotencySweep(sql: Sql, log: Logger): () => void {
  const sweep = setInterval(() => {
    sql`delete from idempotency_keys where created_at < now() - make_interval(hours => ${IDEMPOTENCY_WINDOW_HOURS + 1})`.catch(
      (err: unknown) => log.warn({ err }, "idempotency key sweep failed"),
    );
  }, 10 * 60 * 1000);
  sweep.unref();
  return () => clearInterval(sweep);
}
