import { create, type DescMessage, type MessageInitShape } from "@bufbuild/protobuf";
import { ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import {
  appError,
  errorCodeOf,
  idempotencyKeyOf,
  IDEMPOTENT_REPLAYED_HEADER,
  requestFingerprint,
  invalidArgument,
  parseAmount,
  parseMetadata,
  parseText,
  principalOf,
} from "@ledger/common";
import {
  CancelTransactionRequestSchema,
  CancelTransactionResponseSchema,
  CreateTransactionRequestSchema,
  CreateTransactionResponseSchema,
  CreateTransactionsRequestSchema,
  CreateTransactionsResponseSchema,
  type CreateTransactionRequest,
  type CreateTransactionResponse,
  type CreateTransactionsRequest,
  type CreateTransactionsResultSchema,
  DefundEntityRequestSchema,
  DefundEntityResponseSchema,
  Direction,
  DisputeTransactionRequestSchema,
  DisputeTransactionResponseSchema,
  FailTransactionRequestSchema,
  FailTransactionResponseSchema,
  FundEntityRequestSchema,
  FundEntityResponseSchema,
  LedgerService,
  PostTransactionRequestSchema,
  PostTransactionResponseSchema,
  ReverseTransactionRequestSchema,
  ReverseTransactionResponseSchema,
  TransactionStatus,
} from "@ledger/proto/ledger/v1/ledger_pb.js";
import { AtomicRefusal, itemError, type Applied, type ItemAnswer, type Submission } from "./batch-units.js";
import { groupToProto, legToProto } from "./groups.js";
import type { LedgerHandlerKit } from "./handler-kit.js";
import { parseLegs, type LegSpec, type MoneyCommand } from "./money.js";
import type { CommandScope, Scope } from "./programs.js";
import { requireId } from "./rpc-input.js";
import { groupOf } from "./write-path.js";

/** The methods of the LedgerService that move money: each becomes a command for group commit (docs/api.md). */
export type TransactionHandlers = Pick<
  ServiceImpl<typeof LedgerService>,
  | "fundEntity"
  | "defundEntity"
  | "createTransaction"
  | "createTransactions"
  | "postTransaction"
  | "cancelTransaction"
  | "failTransaction"
  | "reverseTransaction"
  | "disputeTransaction"
>;

/** Most items in one CreateTransactions call (docs/api.md#batches). */
export const MAX_BATCH_ITEMS = 1000;

/** The method whose idempotency fingerprint a batch item shares. */
const SINGLE_METHOD = `${LedgerService.typeName}/${LedgerService.method.createTransaction.name}`;

/** The command of a CreateTransaction request, validated; throws what the call answers. */
function transactionCommand(req: CreateTransactionRequest, base: CommandScope): MoneyCommand {
  const description = parseText(req.description, "description", { required: true });
  const metadata = parseMetadata(req.metadata) ?? null;
  let status: "pending" | "posted";
  if (req.status === TransactionStatus.UNSPECIFIED || req.status === TransactionStatus.PENDING) status = "pending";
  else if (req.status === TransactionStatus.POSTED) status = "posted";
  else throw invalidArgument("status must be pending or posted");
  let legs: LegSpec[];
  if (req.form.case === "transfer") {
    const { fromEntityId, toEntityId, amount } = req.form.value;
    requireId(fromEntityId, "account.from");
    requireId(toEntityId, "account.to");
    if (fromEntityId === toEntityId) throw invalidArgument("account.from and account.to must be different entities");
    parseAmount(amount);
    legs = [
      { entityId: fromEntityId, direction: "debit", amount },
      { entityId: toEntityId, direction: "credit", amount },
    ];
  } else if (req.form.case === "entries") {
    legs = req.form.value.entries.map((entry, i) => {
      if (entry.direction === Direction.UNSPECIFIED) throw invalidArgument(`entries[${i}].direction must be debit or credit`);
      return { entityId: entry.entityId, direction: entry.direction === Direction.DEBIT ? "debit" : "credit", amount: entry.amount };
    });
    parseLegs(legs);
  } else {
    throw invalidArgument("give either amount with account {from, to}, or entries");
  }
  return { kind: "create", ...base, description, metadata, status, legs };
}

/** A post, cancel or fail of a pending group, validated. */
async function settleCommand(
  scope: Scope,
  ctx: HandlerContext,
  programId: string,
  groupId: string,
  to: "posted" | "canceled" | "failed",
  reason: string,
) {
  const base = await scope(ctx, programId);
  requireId(groupId, "transaction_group_id");
  parseText(reason, "reason");
  return { kind: "settle" as const, ...base, groupId, to, reason };
}

const groupResponse = (outcome: Applied) => ({ transactionGroup: groupToProto(groupOf(outcome)) });

/** Handlers of the money commands: each validates its request into a command and maps the outcome. */
export function createTransactionHandlers(kit: LedgerHandlerKit): TransactionHandlers {
  const { submit, scope } = kit;

  return {
    async fundEntity(req, ctx) {
      const base = await scope(ctx, req.programId);
      const entityId = requireId(req.entityId, "entity_id");
      const amount = parseAmount(req.amount);
      const description = parseText(req.description, "description") || "Deposit";
      return submit(
        ctx,
        FundEntityRequestSchema,
        req,
        FundEntityResponseSchema,
        { kind: "fund", ...base, entityId, amount, description },
        (outcome) => {
          const group = groupOf(outcome);
          return { transactionGroup: groupToProto(group), credit: legToProto(group.legs[1]!, group.status) };
        },
      );
    },

    async defundEntity(req, ctx) {
      const base = await scope(ctx, req.programId);
      const entityId = requireId(req.entityId, "entity_id");
      const amount = parseAmount(req.amount);
      const description = parseText(req.description, "description") || "Withdrawal";
      return submit(
        ctx,
        DefundEntityRequestSchema,
        req,
        DefundEntityResponseSchema,
        { kind: "defund", ...base, entityId, amount, description },
        (outcome) => {
          const group = groupOf(outcome);
          return { transactionGroup: groupToProto(group), debit: legToProto(group.legs[0]!, group.status) };
        },
      );
    },

    async createTransaction(req, ctx) {
      const command = transactionCommand(req, await scope(ctx, req.programId));
      return submit(ctx, CreateTransactionRequestSchema, req, CreateTransactionResponseSchema, command, groupResponse);
    },

    createTransactions: (req, ctx) => createTransactions(kit, req, ctx),

    async postTransaction(req, ctx) {
      const command = await settleCommand(scope, ctx, req.programId, req.transactionGroupId, "posted", "");
      return submit(ctx, PostTransactionRequestSchema, req, PostTransactionResponseSchema, command, groupResponse);
    },

    async cancelTransaction(req, ctx) {
      const command = await settleCommand(scope, ctx, req.programId, req.transactionGroupId, "canceled", "");
      return submit(ctx, CancelTransactionRequestSchema, req, CancelTransactionResponseSchema, command, groupResponse);
    },

    async failTransaction(req, ctx) {
      const command = await settleCommand(scope, ctx, req.programId, req.transactionGroupId, "failed", req.reason);
      return submit(ctx, FailTransactionRequestSchema, req, FailTransactionResponseSchema, command, groupResponse);
    },

    async reverseTransaction(req, ctx) {
      const base = await scope(ctx, req.programId);
      const groupId = requireId(req.transactionGroupId, "transaction_group_id");
      const description = parseText(req.description, "description");
      return submit(
        ctx,
        ReverseTransactionRequestSchema,
        req,
        ReverseTransactionResponseSchema,
        { kind: "reverse", ...base, groupId, description },
        (outcome) => ({
          transactionGroup: groupToProto(groupOf(outcome)),
          reversalTransactionGroupId: outcome.reversal!.id,
          reversalTransactionGroup: groupToProto(outcome.reversal!),
        }),
      );
    },

    async disputeTransaction(req, ctx) {
      const base = await scope(ctx, req.programId);
      const groupId = requireId(req.transactionGroupId, "transaction_group_id");
      const reason = parseText(req.reason, "reason");
      return submit(
        ctx,
        DisputeTransactionRequestSchema,
        req,
        DisputeTransactionResponseSchema,
        { kind: "dispute", ...base, groupId, reason },
        groupResponse,
      );
    },
  };
}

/**
 * CreateTransactions: every item validated on its own (a refused item does not refuse the others
 * unless the batch is atomic), then all of them submitted to group commit as one batch.
 */
async function createTransactions(kit: LedgerHandlerKit, req: CreateTransactionsRequest, ctx: HandlerContext) {
  const { scope } = kit;
  if (req.transactions.length === 0 || req.transactions.length > MAX_BATCH_ITEMS) {
    throw invalidArgument(`transactions must hold 1 to ${MAX_BATCH_ITEMS} items; got ${req.transactions.length}`, {
      field: "transactions",
    });
  }
  const principal = principalOf(ctx);
  const wholeKey = idempotencyKeyOf(ctx);
  // Most batches name one program: resolve each program once, and let an unknown one refuse only its items.
  const scopes = new Map<string, Promise<CommandScope>>();
  const scopeOf = (programId: string) => {
    let found = scopes.get(programId);
    if (!found) {
      found = scope(ctx, programId);
      found.catch(() => {});
      scopes.set(programId, found);
    }
    return found;
  };
  const items = await Promise.all(
    req.transactions.map(async (item, index): Promise<Submission<typeof CreateTransactionResponseSchema>> => {
      const responseSchema = CreateTransactionResponseSchema;
      const respond = groupResponse;
      try {
        const transaction = create(CreateTransactionRequestSchema, item.transaction ?? {});
        if (!item.transaction) throw invalidArgument(`transactions[${index}] is empty`);
        transaction.programId ||= req.programId;
        const command = transactionCommand(transaction, await scopeOf(transaction.programId));
        if (item.idempotencyKey === "") return { responseSchema, respond, command };
        if (item.idempotencyKey.length > 255)
          throw invalidArgument("idempotency_key must be 1 to 255 characters", { field: "idempotency_key" });
        // The same fingerprint as CreateTransaction's: an item and a single call with one key and one body are one request.
        const fingerprint = requestFingerprint(SINGLE_METHOD, CreateTransactionRequestSchema, transaction);
        return {
          responseSchema,
          respond,
          command,
          idempotency: { accountId: principal.accountId, key: item.idempotencyKey, fingerprint },
        };
      } catch (err) {
        return { responseSchema, respond, command: ConnectError.from(err) };
      }
    }),
  );
  const fingerprint =
    wholeKey === undefined
      ? undefined
      : requestFingerprint(`${ctx.service.typeName}/${ctx.method.name}`, CreateTransactionsRequestSchema, req);
  try {
    const answer = await kit.batcher.submitBatch({
      items: items as unknown as Array<Submission<DescMessage>>,
      atomic: req.atomic,
      ...(wholeKey !== undefined ? { idempotency: { accountId: principal.accountId, key: wholeKey, fingerprint: fingerprint! } } : {}),
      responseSchema: CreateTransactionsResponseSchema,
      respond: batchAnswer,
    });
    if (answer.replayed) ctx.responseHeader.set(IDEMPOTENT_REPLAYED_HEADER, "true");
    return answer.response;
  } catch (err) {
    if (!(err instanceof AtomicRefusal)) throw err;
    // An atomic batch answers its first refused item's error, naming the item.
    const { code, details } = errorCodeOf(err.error);
    throw appError(
      err.error.code,
      code,
      `transactions[${err.index}]: ${err.error.rawMessage}`,
      Object.assign({}, details, { index: err.index }),
    );
  }
}

/** A batch call's answer: how many items succeeded and failed, and one result per item, in request order. */
export function batchAnswer(answers: ItemAnswer[]): MessageInitShape<typeof CreateTransactionsResponseSchema> {
  const failed = answers.filter((answer) => answer instanceof ConnectError).length;
  return { succeeded: answers.length - failed, failed, results: answers.map(batchResult) };
}

/** One item's result: its group (and whether it was replayed), or why it was refused. */
function batchResult(answer: ItemAnswer): MessageInitShape<typeof CreateTransactionsResultSchema> {
  if (answer instanceof ConnectError) return { result: { case: "error", value: itemError(answer) } };
  const group = (answer.response as CreateTransactionResponse).transactionGroup!;
  return { result: { case: "transactionGroup", value: group }, replayed: answer.replayed };
}
