import type { ServiceImpl } from "@connectrpc/connect";
import {
  invalidArgument,
  isId,
  parseMetadata,
  parseOverdraftLimit,
  parsePageRequest,
  parseText,
  requireMoment,
  toPage,
  type Outbox,
  type Tx,
} from "@ledger/common";
import {
  CloseEntityRequestSchema,
  CloseEntityResponseSchema,
  CreateEntityRequestSchema,
  CreateEntityResponseSchema,
  FreezeEntityRequestSchema,
  FreezeEntityResponseSchema,
  type LedgerService,
  UnfreezeEntityRequestSchema,
  UnfreezeEntityResponseSchema,
  UpdateEntityRequestSchema,
  UpdateEntityResponseSchema,
} from "@ledger/proto/ledger/v1/ledger_pb.js";
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
import type { LedgerHandlerKit } from "./handler-kit.js";
import { parseNameFilter, parseRowFilters } from "./list-query.js";
import { ensureExternalEntity, findProgram, parseCurrencyCode, parseName, type CommandScope } from "./programs.js";
import { requireId } from "./rpc-input.js";

/** The methods of the LedgerService that create, read and change entities themselves (docs/api.md). */
export type EntityHandlers = Pick<
  ServiceImpl<typeof LedgerService>,
  "createEntity" | "getEntity" | "getEntityStatement" | "listEntities" | "updateEntity" | "freezeEntity" | "unfreezeEntity" | "closeEntity"
>;

/**
 * Freeze, unfreeze or close, inside the call's transaction: the entity's row is locked as money
 * commands lock it, so the change commits between two of them, and every debit that commits after
 * a freeze sees it.
 */
async function entityStep(outbox: Outbox, tx: Tx, base: CommandScope, entityId: string, change: StatusChange) {
  const row = await changeStatus(tx, await lockEntity(tx, base.accountId, base.programId, entityId), change);
  await outbox.enqueue(tx, [entityEvent("entity.updated", row, base)]);
  return { entity: entityToProto(row) };
}

/** Handlers of the entities: each checks its request, then reads or changes the entity in its program. */
export function createEntityHandlers(kit: LedgerHandlerKit): EntityHandlers {
  const { sql, mutate, scope, outbox } = kit;

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
        await outbox.enqueue(tx, [entityEvent("entity.updated", row, base)]);
        return { entity: entityToProto(row) };
      });
    },

    async freezeEntity(req, ctx) {
      const base = await scope(ctx, req.programId);
      const entityId = requireId(req.entityId, "entity_id");
      const change: StatusChange = { to: "frozen", reason: parseText(req.reason, "reason") };
      return mutate(ctx, FreezeEntityRequestSchema, req, FreezeEntityResponseSchema, (tx) =>
        entityStep(outbox, tx, base, entityId, change),
      );
    },

    async unfreezeEntity(req, ctx) {
      const base = await scope(ctx, req.programId);
      const entityId = requireId(req.entityId, "entity_id");
      return mutate(ctx, UnfreezeEntityRequestSchema, req, UnfreezeEntityResponseSchema, (tx) =>
        entityStep(outbox, tx, base, entityId, { to: "active" }),
      );
    },

    async closeEntity(req, ctx) {
      const base = await scope(ctx, req.programId);
      const entityId = requireId(req.entityId, "entity_id");
      return mutate(ctx, CloseEntityRequestSchema, req, CloseEntityResponseSchema, (tx) =>
        entityStep(outbox, tx, base, entityId, { to: "closed" }),
      );
    },
  };
}
