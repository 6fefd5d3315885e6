import { createHash } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import { create, fromBinary, toBinary, type DescMessage, type MessageInitShape, type MessageShape } from "@bufbuild/protobuf";
import { Code, type HandlerContext } from "@connectrpc/connect";
import type { Logger } from "pino";
import { pipelinedTransaction, sentWrites, sqlState, type Sql, type Tx } from "./db.js";
import { appError, invalidArgument, ruleViolation } from "./errors.js";

/** Header that carries the key, on REST and on RPC alike. */
export const IDEMPOTENCY_KEY_HEADER = "idempotency-key";
/** Response header set when a stored response is replayed. */
export const IDEMPOTENT_REPLAYED_HEADER = "idempotent-replayed";
/** How long a key is remembered (docs/api.md#idempotency). */
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
  const claim = await claimKey(tx, accountId, key, fingerprint);
  // Only a committed claim is visible, and in one-transaction work every committed claim stores its response.
  if (claim.kind === "running") throw new Error("idempotency key committed without a response");
  return claim;
}

/** A claim, or `running`: the key's first request committed its start but not yet its response. */
type KeyClaimResult = Claim | { kind: "running" };

async function claimKey(tx: Tx, accountId: string, key: string, fingerprint: Buffer): Promise<KeyClaimResult> {
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
  if (!existing.response) return { kind: "running" };
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
 * Stores new keys with their responses in one statement, for work that applied its requests
 * without claiming their keys first (the ledger's cached batches, docs/architecture.md#cached-balances).
 * A key that exists already fails the statement (23505, `isKnownKeyError`) and with it the
 * transaction: the caller then claims the keys the usual way, and replays or refuses. Callers pass
 * the keys sorted, as to `claimIdempotencyKeys`, so two inserts never wait on each other in a cycle.
 * The statement is sent, not awaited, like `settleIdempotencyKeys`'s.
 */
export function insertIdempotencyKeys(
  tx: Tx,
  keys: Array<{ accountId: string; key: string; fingerprint: Buffer; response: Uint8Array }>,
): Promise<unknown>[] {
  const writes = sentWrites();
  if (keys.length > 0) {
    writes.push(
      tx`
      insert into idempotency_keys (account_id, key, fingerprint, response)
      select k.account_id, k.key, decode(k.fingerprint, 'hex'), decode(k.response, 'hex')
      from unnest(${keys.map((k) => k.accountId)}::text[], ${keys.map((k) => k.key)}::text[],
                  ${keys.map((k) => k.fingerprint.toString("hex"))}::text[],
                  ${keys.map((k) => Buffer.from(k.response).toString("hex"))}::text[]) with ordinality as k(account_id, key, fingerprint, response, n)
      order by k.n`.execute(),
    );
  }
  return writes;
}

/**
 * Whether `err` is `insertIdempotencyKeys` finding a key that exists already: a unique violation
 * of the table's primary key, its only unique index. Told by the table, not the constraint's name:
 * where the table is partitioned or distributed (docs/scaling.md), Postgres names the partition's
 * or shard's table and index (`idempotency_keys_p0_pkey`, `idempotency_keys_pkey_102008`).
 */
export function isKnownKeyError(err: unknown): boolean {
  const { table_name: table, constraint_name: constraint } = err as { table_name?: string; constraint_name?: string };
  return sqlState(err) === "23505" && (table?.startsWith("idempotency_keys") ?? false) && (constraint?.includes("pkey") ?? false);
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
  const writes = sentWrites();
  if (completed.length > 0) {
    writes.push(
      tx`
      update idempotency_keys k set response = decode(v.response, 'hex')
      from unnest(${completed.map((c) => c.accountId)}::text[], ${completed.map((c) => c.key)}::text[],
                  ${completed.map((c) => Buffer.from(c.response).toString("hex"))}::text[]) as v(account_id, key, response)
      where k.account_id = v.account_id and k.key = v.key`.execute(),
    );
  }
  if (refused.length > 0) {
    // A refused request stores nothing: its claim goes, so a retry with the key is tried afresh.
    writes.push(
      tx`
      delete from idempotency_keys k
      using unnest(${refused.map((c) => c.accountId)}::text[], ${refused.map((c) => c.key)}::text[]) as v(account_id, key)
      where k.account_id = v.account_id and k.key = v.key`.execute(),
    );
  }
  return writes;
}

/** Stores the response of a claimed key, in the same transaction as the effect. */
export async function completeIdempotencyKey(tx: Tx, accountId: string, key: string, response: Uint8Array): Promise<void> {
  await tx`update idempotency_keys set response = ${response} where account_id = ${accountId} and key = ${key}`;
}

/**
 * How a service keeps stored responses at rest when their plain bytes must not rest there, for
 * example because they carry a secret: `seal` runs before a response is stored, `open` before a
 * stored one is replayed. `aad` names the key (account and key), so a stored response copied onto
 * another key can be refused.
 */
export interface StoredResponseCodec {
  seal(response: Uint8Array, aad: string): Uint8Array;
  open(stored: Uint8Array, aad: string): Uint8Array;
}

/**
 * Runs `effect` in `begin`'s transaction, once per key: a repeat of the same request replays the
 * stored response (and sets `idempotent-replayed`), a different request with the key is refused.
 * Only successful responses are stored, because a failure rolls the claim back with the effect.
 * With `codec`, the response is stored sealed and opened when replayed.
 */
export async function runIdempotent<I extends DescMessage, O extends DescMessage>(args: {
  ctx: HandlerContext;
  begin: <T>(fn: (tx: Tx) => Promise<T>) => Promise<T>;
  accountId: string;
  requestSchema: I;
  request: MessageShape<I>;
  responseSchema: O;
  effect: (tx: Tx) => Promise<MessageInitShape<O>>;
  codec?: StoredResponseCodec;
}): Promise<MessageShape<O>> {
  const { ctx, accountId, responseSchema } = args;
  const key = idempotencyKeyOf(ctx);
  if (key === undefined) return args.begin(async (tx) => create(responseSchema, await args.effect(tx)));
  const fingerprint = requestFingerprint(`${ctx.service.typeName}/${ctx.method.name}`, args.requestSchema, args.request);
  const aad = `${accountId}\u0000${key}`;
  return args.begin(async (tx) => {
    const claim = await claimIdempotencyKey(tx, accountId, key, fingerprint);
    if (claim.kind === "replay") {
      ctx.responseHeader.set(IDEMPOTENT_REPLAYED_HEADER, "true");
      return fromBinary(responseSchema, args.codec ? args.codec.open(claim.response, aad) : claim.response);
    }
    const response = create(responseSchema, await args.effect(tx));
    const bytes = toBinary(responseSchema, response);
    await completeIdempotencyKey(tx, accountId, key, args.codec ? args.codec.seal(bytes, aad) : bytes);
    return response;
  });
}

/**
 * Deletes keys past the window every ten minutes (they only take space); returns the stop function.
 * Each service with an `idempotency_keys` table runs one.
 */
export function startIdempotencySweep(sql: Sql, log: Logger): () => void {
  const sweep = setInterval(
    () => {
      sql`delete from idempotency_keys where created_at < now() - make_interval(hours => ${IDEMPOTENCY_WINDOW_HOURS + 1})`.catch(
        (err: unknown) => log.warn({ err }, "idempotency key sweep failed"),
      );
    },
    10 * 60 * 1000,
  );
  sweep.unref();
  return () => clearInterval(sweep);
}

/**
 * Idempotency for work that cannot be one transaction: a service that records an intent, calls
 * another service, then records the result (the hold service and the ledger). The key is claimed
 * in the intent's transaction and tagged with the operation that will answer it. Whoever completes
 * the operation (the request itself, or recovery after a crash) stores the response with
 * `answerIdempotencyKeys` in the completion's transaction; a refused operation drops its keys with
 * `forgetIdempotencyKeys`, so a retry is tried afresh. A request that finds its key claimed but
 * not yet answered waits for the answer and replays it. Such a service's `idempotency_keys` table
 * has an `operation` column for this.
 *
 * `start` records the intent in the claim's transaction (statements it puts in `writes` go with the
 * commit) and names the operation. Without a key it runs alone, in a transaction all the same.
 *
 * `transaction` runs the claim and `start` (default: a transaction of their own). A service with
 * group commit passes its own, which may share the transaction with other requests: so a `start`
 * that refuses drops the key it claimed in that transaction rather than relying on a rollback.
 */
export async function startIdempotentOperation<T>(args: {
  sql: Sql;
  claim: KeyClaim | undefined;
  start: (tx: Tx, writes: Promise<unknown>[]) => Promise<{ operation: string; value: T }>;
  /** How long a duplicate waits for the first request's answer before asking the client to retry. */
  waitMs?: number;
  transaction?: <R>(work: (tx: Tx, writes: Promise<unknown>[]) => Promise<R>) => Promise<R>;
}): Promise<{ kind: "started"; value: T } | { kind: "replay"; response: Uint8Array }> {
  const { sql, claim } = args;
  const transaction = args.transaction ?? ((work) => pipelinedTransaction(sql, work));
  for (;;) {
    const step = await transaction(async (tx, writes) => {
      if (claim) {
        const found = await claimKey(tx, claim.accountId, claim.key, claim.fingerprint);
        if (found.kind !== "new") return found;
      }
      let started: { operation: string; value: T };
      try {
        started = await args.start(tx, writes);
      } catch (err) {
        if (claim) {
          const forget =
            tx`delete from idempotency_keys where account_id = ${claim.accountId} and key = ${claim.key} and response is null`.execute();
          forget.catch(() => {}); // awaited with the commit when the transaction goes on; moot when it rolls back
          writes.push(forget);
        }
        throw err;
      }
      const { operation, value } = started;
      if (claim) {
        writes.push(
          tx`update idempotency_keys set operation = ${operation} where account_id = ${claim.accountId} and key = ${claim.key}`.execute(),
        );
      }
      return { kind: "started" as const, value };
    });
    if (step.kind !== "running") return step;
    const response = await awaitIdempotentResponse(sql, claim!, args.waitMs ?? 10_000);
    if (response) return { kind: "replay", response };
    // The first request was refused and its claim dropped: this one is tried afresh.
  }
}

/**
 * Waits for the response of a key whose first request is still running. Undefined when the claim
 * went away (that request was refused); Aborted, for the client to retry, when it takes too long.
 */
async function awaitIdempotentResponse(sql: Sql, claim: KeyClaim, waitMs: number): Promise<Uint8Array | undefined> {
  const deadline = Date.now() + waitMs;
  for (let pause = 5; ; pause = Math.min(pause * 2, 200)) {
    const [row] = await sql<{ fingerprint: Buffer; response: Uint8Array | null }[]>`
      select fingerprint, response from idempotency_keys where account_id = ${claim.accountId} and key = ${claim.key}`;
    if (!row) return undefined;
    if (!Buffer.from(row.fingerprint).equals(claim.fingerprint)) {
      throw ruleViolation("idempotency_conflict", "this Idempotency-Key was already used with a different request");
    }
    if (row.response) return row.response;
    if (Date.now() >= deadline) {
      throw appError(Code.Aborted, "conflict", "a request with this Idempotency-Key is still in progress; retry it shortly");
    }
    await sleep(pause);
  }
}

/**
 * Stores `response` for every key waiting on `operation`, in the completion's transaction. Sent,
 * not awaited: the caller awaits it with its commit. A key answered already is left as it is.
 */
export function answerIdempotencyKeys(tx: Tx, operation: string, response: Uint8Array): Promise<unknown> {
  return tx`update idempotency_keys set response = ${response} where operation = ${operation} and response is null`.execute();
}

/** Drops the unanswered keys of a refused `operation`, so a retry with one of them is tried afresh. Sent, not awaited. */
export function forgetIdempotencyKeys(tx: Tx, operation: string): Promise<unknown> {
  return tx`delete from idempotency_keys where operation = ${operation} and response is null`.execute();
}
