import type { ServiceImpl } from "@connectrpc/connect";
import { invalidArgument, isId, parsePageRequest, principalOf, toPage } from "@ledger/common";
import {
  CreateProgramRequestSchema,
  CreateProgramResponseSchema,
  type LedgerService,
  TransactionStatus,
  UpdateProgramRequestSchema,
  UpdateProgramResponseSchema,
} from "@ledger/proto/ledger/v1/ledger_pb.js";
import { createBalanceAlertHandlers } from "./balance-alert-rpc.js";
import { findEntity } from "./entities.js";
import { createEntityHandlers } from "./entity-rpc.js";
import { createHandlerKit, type LedgerDeps } from "./handler-kit.js";
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
import { parseRowFilters } from "./list-query.js";
import { findProgram, insertProgram, listPrograms, parseCurrencyCode, parseName, programToProto } from "./programs.js";
import { requireId } from "./rpc-input.js";
import { createTransactionHandlers } from "./transaction-rpc.js";

/** The stored status a list asks for; undefined for UNSPECIFIED, 400 for a value not in the enum. */
function statusFilter(status: TransactionStatus): GroupStatus | undefined {
  const found = statusFromProto(status);
  if (found === undefined && status !== TransactionStatus.UNSPECIFIED) {
    throw invalidArgument(`status ${status} is not a transaction status`, { field: "status" });
  }
  return found;
}

/**
 * The ledger's RPC handlers: each validates, builds a command or query, and maps the result. The
 * entities' and the money commands' handlers are in entity-rpc.ts and transaction-rpc.ts; the
 * reads of transactions and the programs' handlers are here.
 */
export function createLedgerService(deps: LedgerDeps): ServiceImpl<typeof LedgerService> {
  const kit = createHandlerKit(deps);
  const { sql, mutate, scope } = kit;

  return {
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

    ...createEntityHandlers(kit),
    ...createTransactionHandlers(kit),
    ...createBalanceAlertHandlers(kit),
  };
}
