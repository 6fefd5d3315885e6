import type { DescMessage, MessageInitShape, MessageShape } from "@bufbuild/protobuf";
import type { HandlerContext } from "@connectrpc/connect";
import {
  idempotencyKeyOf,
  IDEMPOTENT_REPLAYED_HEADER,
  principalOf,
  requestFingerprint,
  runIdempotent,
  type Outbox,
  type Sql,
  type Tx,
} from "@ledger/common";
import type { Applied } from "./batch-units.js";
import type { createBatcher } from "./batcher.js";
import type { MoneyCommand } from "./money.js";

/**
 * The call's idempotency for the batcher: its key, scoped to the caller's account, with the
 * fingerprint of the method and request that a replay must match. Undefined without a key.
 */
export function callIdempotency<I extends DescMessage>(ctx: HandlerContext, requestSchema: I, request: MessageShape<I>) {
  const key = idempotencyKeyOf(ctx);
  if (key === undefined) return undefined;
  return {
    accountId: principalOf(ctx).accountId,
    key,
    fingerprint: requestFingerprint(`${ctx.service.typeName}/${ctx.method.name}`, requestSchema, request),
  };
}

/**
 * The one write path of the ledger. Money commands go to the group-commit batcher (`submit`);
 * other writes (entities, programs) run in a transaction of their own (`mutate`). Both are
 * idempotent per key, and both wake the outbox relay after commit.
 */
export function createWritePath(deps: { sql: Sql; outbox: Outbox; batcher: ReturnType<typeof createBatcher> }) {
  const { sql, outbox, batcher } = deps;

  async function mutate<I extends DescMessage, O extends DescMessage>(
    ctx: HandlerContext,
    requestSchema: I,
    request: MessageShape<I>,
    responseSchema: O,
    effect: (tx: Tx) => Promise<MessageInitShape<O>>,
  ): Promise<MessageShape<O>> {
    const response = await runIdempotent({
      ctx,
      begin: (fn) => sql.begin(fn) as Promise<never>,
      accountId: principalOf(ctx).accountId,
      requestSchema,
      request,
      responseSchema,
      effect,
    });
    outbox.wake();
    return response;
  }

  /** Applies one money command through group commit and answers with `respond(outcome)`. */
  async function submit<I extends DescMessage, O extends DescMessage>(
    ctx: HandlerContext,
    requestSchema: I,
    request: MessageShape<I>,
    responseSchema: O,
    command: MoneyCommand,
    respond: (outcome: Applied) => MessageInitShape<O>,
  ): Promise<MessageShape<O>> {
    const idempotency = callIdempotency(ctx, requestSchema, request);
    const answer = await batcher.submit({ command, responseSchema, respond, ...(idempotency ? { idempotency } : {}) });
    if (answer.replayed) ctx.responseHeader.set(IDEMPOTENT_REPLAYED_HEADER, "true");
    return answer.response;
  }

  return { mutate, submit };
}

/** The group a command created or changed; every transaction command has one. */
/** What `createWritePath` makes: `mutate` and `submit`. */
export type WritePath = ReturnType<typeof createWritePath>;

export function groupOf(outcome: Applied) {
  if (!outcome.group) throw new Error("the command produced no transaction group");
  return outcome.group;
}
