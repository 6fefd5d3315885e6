import type { ServiceImpl } from "@connectrpc/connect";
import {
  CreateBalanceAlertRequestSchema,
  CreateBalanceAlertResponseSchema,
  DeleteBalanceAlertRequestSchema,
  DeleteBalanceAlertResponseSchema,
  type LedgerService,
} from "@ledger/proto/ledger/v1/ledger_pb.js";
import { alertToProto, createBalanceAlert, deleteBalanceAlert, listBalanceAlerts, parseAlertCondition } from "./balance-alerts.js";
import { findEntity } from "./entities.js";
import type { LedgerHandlerKit } from "./handler-kit.js";
import { requireId } from "./rpc-input.js";

/** The balance alert methods of the LedgerService (docs/api.md#balance-alerts). */
export type BalanceAlertHandlers = Pick<
  ServiceImpl<typeof LedgerService>,
  "createBalanceAlert" | "listBalanceAlerts" | "deleteBalanceAlert"
>;

/** Handlers of the balance alerts: each checks its request, then reads or changes them in the entity's program. */
export function createBalanceAlertHandlers(kit: LedgerHandlerKit): BalanceAlertHandlers {
  const { sql, mutate, scope } = kit;
  return {
    async createBalanceAlert(req, ctx) {
      const { accountId, programId } = await scope(ctx, req.programId);
      const entityId = requireId(req.entityId, "entity_id");
      const condition = parseAlertCondition(req.field, req.operator, req.value);
      return mutate(ctx, CreateBalanceAlertRequestSchema, req, CreateBalanceAlertResponseSchema, async (tx) => ({
        alert: alertToProto(await createBalanceAlert(tx, { accountId, programId, entityId, condition })),
      }));
    },

    async listBalanceAlerts(req, ctx) {
      const { accountId, programId } = await scope(ctx, req.programId);
      const entity = await findEntity(sql, accountId, programId, requireId(req.entityId, "entity_id"));
      return { alerts: (await listBalanceAlerts(sql, entity.account_id, entity.id)).map(alertToProto) };
    },

    async deleteBalanceAlert(req, ctx) {
      const { accountId, programId } = await scope(ctx, req.programId);
      const alertId = requireId(req.alertId, "alert_id");
      return mutate(ctx, DeleteBalanceAlertRequestSchema, req, DeleteBalanceAlertResponseSchema, async (tx) => {
        await deleteBalanceAlert(tx, accountId, programId, alertId);
        return {};
      });
    },
  };
}
