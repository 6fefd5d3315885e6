import type { DescMessage, MessageInitShape, MessageShape } from "@bufbuild/protobuf";
import type { HandlerContext } from "@connectrpc/connect";
import { principalOf, runIdempotent, type Outbox, type Sql, type Tx } from "@ledger/common";
import { applyCommands, expectOk, type ExternalEntityCache, type MoneyCommand } from "./money.js";

/**
 * The one write path of the ledger: every mutation runs in one transaction, once per idempotency
 * key; money commands go through `applyCommands` and their events into the outbox in that same
 * transaction; the relay is woken after commit.
 */
export function createWritePath(deps: { sql: Sql; outbox: Outbox }) {
  const { sql, outbox } = deps;
  const externals: ExternalEntityCache = new Map();

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

  async function apply(tx: Tx, command: MoneyCommand) {
    const { outcomes, events } = await applyCommands(tx, [command], externals);
    const outcome = expectOk(outcomes[0]!);
    await outbox.enqueue(tx, events);
    return outcome;
  }

  /** Applies a command that creates or changes a transaction group. */
  async function applyForGroup(tx: Tx, command: MoneyCommand) {
    const outcome = await apply(tx, command);
    if (!outcome.group) throw new Error(`${command.kind} produced no transaction group`);
    return { group: outcome.group, reversal: outcome.reversal };
  }

  return { mutate, apply, applyForGroup };
}
