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
  parseOverdraftLimit,
  parseText,
  isId,
  parsePageRequest,
  principalOf,
  requireMoment,
  toPage,
  type Sql,
  type Tx,
} from "@ledger/common";
import type { Outbox } from "@ledger/common";
import {
  CancelTransactionRequestSchema,
  CancelTransactionResponseSchema,
  CreateEntityRequestSchema,
  CreateEntityResponseSchema,
  CreateProgramRequestSchema,
  CreateProgramResponseSchema,
  CreateTransactionRequestSchema,
  CreateTransactionResponseSchema,
  CreateTransactionsRequestSchema,
  CreateTransactionsResponseSchema,
  type CreateTransactionRequest,
  type CreateTransactionResponse,
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
  CloseEntityRequestSchema,
  CloseEntityResponseSchema,
  FreezeEntityRequestSchema,
  FreezeEntityResponseSchema,
  UnfreezeEntityRequestSchema,
  UnfreezeEntityResponseSchema,
  UpdateEntityRequestSchema,
  UpdateEntityResponseSchema,
  UpdateProgramRequestSchema,
  UpdateProgramResponseSchema,
} from "@ledger/proto/ledger/v1/ledger_pb.js";
import { createBalanceAlertHandlers } from "./balance-alert-rpc.js";
import { AtomicRefusal, itemError, type Applied, type ItemAnswer, type Submission } from "./batch-units.js";
import type { createBatcher } from "./batcher.js";
import { createWritePath, groupOf } from "./write-path.js";
import {
  changeStatus,
  entityStatusFromProto,
  entityToProto,
  findEntity,
  insertEntity,
  listEntities,
  lockEntity,
  updateEntity,
  type EntityChanges,
  type StatusChange,
} from "./entities.js";
import { entityEvent } from "./events.js";
import { findEntityAsOf, statementPage, statementRequest } from "./history.js";
import {
  findGroup,
  findLeg,
  groupToProto,
  legToProto,
  listGroups,
  listLegs,
  statusFromProto,
  withLegs,
  type GroupStatus,
} from "./groups.js";
import { parseNameFilter, parseRowFilters } from "./list-query.js";
import { parseLegs, type LegSpec, type MoneyCommand } from "./money.js";
import {
  commandScope,
  ensureExternalEntity,
  findProgram,
  insertProgram,
  listPrograms,
  parseCurrencyCode,
  parseName,
  programToProto,
  type CommandScope,
  type ProgramResolver,
} from "./programs.js";

/** What the ledger's handlers need. */
export interface LedgerDeps {
  sql: Sql;
  outbox: Outbox;
  batcher: ReturnType<typeof createBatcher>;
  resolveProgram: ProgramResolver;
}

/** The stored status a list asks for; undefined for UNSPECIFIED, 400 for a value not in the enum. */
function statusFilter(status: TransactionStatus): GroupStatus | undefined {
  const found = statusFromProto(status);
  if (found === undefined && status !== TransactionStatus.UNSPECIFIED) {
    throw invalidArgument(`status ${status} is not a transaction status`, { field: "status" });
  }
  return found;
}

function requireId(value: string, field: string): string {
  if (value === "") throw invalidArgument(`${field} is required`);
  return value;
}

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

/** The ledger's RPC handlers: each validates, builds a command or query, and maps the result. */
export function createLedgerService(deps: LedgerDeps): ServiceImpl<typeof LedgerService> {
  const { sql } = deps;
  const { mutate, submit } = createWritePath(deps);

  const scope = (ctx: HandlerContext, programId: string) => commandScope(ctx, deps.resolveProgram, programId);

  async function settleCommand(
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

  /**
   * Freeze, unfreeze or close, inside the call's transaction: the entity's row is locked as money
   * commands lock it, so the change commits between two of them, and every debit that commits after
   * a freeze sees it.
   */
  async function entityStep(tx: Tx, base: CommandScope, entityId: string, change: StatusChange) {
    const row = await changeStatus(tx, await lockEntity(tx, base.accountId, base.programId, entityId), change);
    await deps.outbox.enqueue(tx, [entityEvent("entity.updated", row, base)]);
    return { entity: entityToProto(row) };
  }

  const groupResponse = (outcome: Applied) => ({ transactionGroup: groupToProto(groupOf(outcome)) });

  return {
    async createEntity(req, ctx) {
      const { accountId, programId } = await scope(ctx, req.programId);
      const name = parseName(req.entityName, "entity_name");
      const type = parseName(req.entityType, "entity_type");
      const metadata = parseMetadata(req.metadata) ?? null;
      const requestedCurrency = req.currencyCode === "" ? undefined : parseCurrencyCode(req.currencyCode);
      const overdraftLimit = parseOverdraftLimit(req.overdraftLimit);
      return mutate(ctx, CreateEntityRequestSchema, req, CreateEntityResponseSchema, async (tx) => {
        const program = await findProgram(tx, accountId, programId);
        const currencyCode = requestedCurrency ?? program.currency_code;
        if (currencyCode !== program.currency_code) await ensureExternalEntity(tx, accountId, programId, currencyCode);
        const row = await insertEntity(tx, { accountId, programId, name, type, currencyCode, metadata, overdraftLimit });
        return { entity: entityToProto(row) };
      });
    },

    async getEntity(req, ctx) {
      const { accountId, programId } = await scope(ctx, req.programId);
      const entityId = requireId(req.entityId, "entity_id");
      const row = req.asOf
        ? await findEntityAsOf(sql, accountId, programId, entityId, requireMoment(req.asOf, "as_of"))
        : await findEntity(sql, accountId, programId, entityId);
      return { entity: entityToProto(row) };
    },

    async getEntityStatement(req, ctx) {
      const { accountId, programId } = await scope(ctx, req.programId);
      const entityId = requireId(req.entityId, "entity_id");
      const request = statementRequest(requireMoment(req.from, "from"), requireMoment(req.to, "to"), req.limit, req.cursor);
      return statementPage(sql, await findEntity(sql, accountId, programId, entityId), request);
    },

    async listEntities(req, ctx) {
      const { accountId, programId } = await scope(ctx, req.programId);
      const page = parsePageRequest(req.limit, req.cursor, (id) => isId("entity", id));
      const filters = parseRowFilters(req);
      const name = parseNameFilter(req.name);
      if (name !== undefined) filters.name = name;
      const status = entityStatusFromProto(req.status);
      const rows = await listEntities(
        sql,
        accountId,
        programId,
        Object.assign({}, page, { type: req.entityType || undefined, status }),
        filters,
      );
      const result = toPage(rows, page, (row) => row.id);
      return { entities: result.items.map(entityToProto), page: result.page };
    },

    async updateEntity(req, ctx) {
      const base = await scope(ctx, req.programId);
      const entityId = requireId(req.entityId, "entity_id");
      const changes: EntityChanges = {};
      if (req.entityName !== undefined) changes.name = parseName(req.entityName, "entity_name");
      if (req.entityType !== undefined) changes.type = parseName(req.entityType, "entity_type");
      const metadata = parseMetadata(req.metadata);
      if (metadata && Object.keys(metadata).length > 0) changes.metadata = metadata;
      if (req.overdraftLimit !== undefined) changes.overdraftLimit = parseOverdraftLimit(req.overdraftLimit);
      if (Object.keys(changes).length === 0) {
        throw invalidArgument("nothing to change: give entity_name, entity_type, metadata or overdraft_limit");
      }
      return mutate(ctx, UpdateEntityRequestSchema, req, UpdateEntityResponseSchema, async (tx) => {
        const row = await updateEntity(tx, await lockEntity(tx, base.accountId, base.programId, entityId), changes);
        await deps.outbox.enqueue(tx, [entityEvent("entity.updated", row, base)]);
        return { entity: entityToProto(row) };
      });
    },

    async freezeEntity(req, ctx) {
      const base = await scope(ctx, req.programId);
      const entityId = requireId(req.entityId, "entity_id");
      const change: StatusChange = { to: "frozen", reason: parseText(req.reason, "reason") };
      return mutate(ctx, FreezeEntityRequestSchema, req, FreezeEntityResponseSchema, (tx) => entityStep(tx, base, entityId, change));
    },

    async unfreezeEntity(req, ctx) {
      const base = await scope(ctx, req.programId);
      const entityId = requireId(req.entityId, "entity_id");
      return mutate(ctx, UnfreezeEntityRequestSchema, req, UnfreezeEntityResponseSchema, (tx) =>
        entityStep(tx, base, entityId, { to: "active" }),
      );
    },

    async closeEntity(req, ctx) {
      const base = await scope(ctx, req.programId);
      const entityId = requireId(req.entityId, "entity_id");
      return mutate(ctx, CloseEntityRequestSchema, req, CloseEntityResponseSchema, (tx) =>
        entityStep(tx, base, entityId, { to: "closed" }),
      );
    },

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

    async createTransactions(req, ctx) {
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
        const answer = await deps.batcher.submitBatch({
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
    },

    async getTransaction(req, ctx) {
      const { accountId, programId } = await scope(ctx, req.programId);
      const entity = await findEntity(sql, accountId, programId, requireId(req.entityId, "entity_id"));
      const leg = await findLeg(sql, entity, requireId(req.transactionId, "transaction_id"));
      return { leg: legToProto(leg, leg.status) };
    },

    async listTransactions(req, ctx) {
      const { accountId, programId } = await scope(ctx, req.programId);
      const page = parsePageRequest(req.limit, req.cursor, (id) => isId("leg", id));
      const filters = parseRowFilters(req);
      const status = statusFilter(req.status);
      const entity = await findEntity(sql, accountId, programId, requireId(req.entityId, "entity_id"));
      const rows = await listLegs(sql, entity, Object.assign({}, page, { status }), filters);
      const result = toPage(rows, page, (row) => row.id);
      return { legs: result.items.map((leg) => legToProto(leg, leg.status)), page: result.page };
    },

    async getTransactionGroup(req, ctx) {
      const { accountId, programId } = await scope(ctx, req.programId);
      const group = await findGroup(sql, accountId, programId, requireId(req.transactionGroupId, "transaction_group_id"));
      return { transactionGroup: groupToProto(group) };
    },

    async listTransactionGroups(req, ctx) {
      const base = await scope(ctx, req.programId);
      const page = parsePageRequest(req.limit, req.cursor, (id) => isId("group", id));
      const filters = parseRowFilters(req);
      const rows = await listGroups(sql, base, Object.assign({}, page, { status: statusFilter(req.status) }), filters);
      const result = toPage(rows, page, (row) => row.id);
      const groups = await withLegs(sql, result.items);
      return { transactionGroups: groups.map(groupToProto), page: result.page };
    },

    async postTransaction(req, ctx) {
      const command = await settleCommand(ctx, req.programId, req.transactionGroupId, "posted", "");
      return submit(ctx, PostTransactionRequestSchema, req, PostTransactionResponseSchema, command, groupResponse);
    },

    async cancelTransaction(req, ctx) {
      const command = await settleCommand(ctx, req.programId, req.transactionGroupId, "canceled", "");
      return submit(ctx, CancelTransactionRequestSchema, req, CancelTransactionResponseSchema, command, groupResponse);
    },

    async failTransaction(req, ctx) {
      const command = await settleCommand(ctx, req.programId, req.transactionGroupId, "failed", req.reason);
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

    async createProgram(req, ctx) {
      const { accountId } = principalOf(ctx);
      const name = parseName(req.programName, "program_name");
      const currencyCode = req.currencyCode === "" ? "USD" : parseCurrencyCode(req.currencyCode);
      return mutate(ctx, CreateProgramRequestSchema, req, CreateProgramResponseSchema, async (tx) => ({
        program: programToProto(await insertProgram(tx, { accountId, name, currencyCode, isDefault: false })),
      }));
    },

    async getProgram(req, ctx) {
      const { accountId, programId } = await scope(ctx, req.programId);
      return { program: programToProto(await findProgram(sql, accountId, programId)) };
    },

    async listPrograms(req, ctx) {
      const { accountId } = principalOf(ctx);
      const page = parsePageRequest(req.limit, req.cursor, (id) => isId("program", id));
      const result = toPage(await listPrograms(sql, accountId, page.limit, page.before), page, (row) => row.id);
      return { programs: result.items.map(programToProto), page: result.page };
    },

    async updateProgram(req, ctx) {
      const { accountId, programId } = await scope(ctx, req.programId);
      const name = parseName(req.programName, "program_name");
      return mutate(ctx, UpdateProgramRequestSchema, req, UpdateProgramResponseSchema, async (tx) => {
        await tx`update programs set name = ${name} where id = ${programId} and account_id = ${accountId}`;
        return { program: programToProto(await findProgram(tx, accountId, programId)) };
      });
    },

    ...createBalanceAlertHandlers(deps),
  };
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
