import { timestampDate } from "@bufbuild/protobuf/wkt";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import {
  IDEMPOTENT_REPLAYED_HEADER,
  idempotencyKeyOf,
  invalidArgument,
  isId,
  notFound,
  parseAmount,
  parsePageRequest,
  parseText,
  principalOf,
  requestFingerprint,
  originOf,
  toPage,
} from "@ledger/common";
import {
  CaptureHoldRequestSchema,
  CreateHoldRequestSchema,
  HoldStatus,
  ReleaseHoldRequestSchema,
  type HoldService,
} from "@ledger/proto/hold/v1/hold_pb.js";
import type { DescMessage, MessageShape } from "@bufbuild/protobuf";
import type { Idempotency } from "./hold-intents.js";
import { HOLD_STATUS_OF, holdToProto } from "./hold-rows.js";
import { parseExpiry, type Answer, type createHolds } from "./holds.js";
import type { LedgerClients } from "./ledger-client.js";

function idempotencyOf<I extends DescMessage>(ctx: HandlerContext, schema: I, request: MessageShape<I>): Idempotency | undefined {
  const key = idempotencyKeyOf(ctx);
  return key === undefined
    ? undefined
    : { key, fingerprint: requestFingerprint(`${ctx.service.typeName}/${ctx.method.name}`, schema, request) };
}

/** The response of an answer, marked as replayed when it is the stored one of an earlier call. */
function respond<O extends DescMessage>(ctx: HandlerContext, answer: Answer<O>): MessageShape<O> {
  if (answer.replayed) ctx.responseHeader.set(IDEMPOTENT_REPLAYED_HEADER, "true");
  return answer.response;
}

/** The hold service's RPC handlers. */
export function createHoldService(holds: ReturnType<typeof createHolds>, ledger: LedgerClients): ServiceImpl<typeof HoldService> {
  return {
    async createHold(req, ctx) {
      const { accountId } = principalOf(ctx);
      if (req.entityId === "") throw invalidArgument("entity_id is required");
      // Only a well-formed id is written into the hold's intent; anything else cannot exist.
      if (!isId("entity", req.entityId)) throw notFound("entity", req.entityId);
      const amount = parseAmount(req.amount);
      const expiresAt = parseExpiry(req.expiresAt ? timestampDate(req.expiresAt) : undefined);
      const idempotency = idempotencyOf(ctx, CreateHoldRequestSchema, req);
      const answer = await holds.create({
        accountId,
        programId: req.programId,
        entityId: req.entityId,
        amount,
        ...(expiresAt ? { expiresAt } : {}),
        description: parseText(req.description, "description"),
        ...(idempotency ? { idempotency } : {}),
        origin: originOf(ctx),
      });
      return respond(ctx, answer);
    },

    async captureHold(req, ctx) {
      const { accountId } = principalOf(ctx);
      if (req.holdId === "") throw invalidArgument("hold_id is required");
      if (req.destinationEntityId === "") throw invalidArgument("destination_entity_id is required");
      if (!isId("entity", req.destinationEntityId)) throw notFound("entity", req.destinationEntityId);
      const idempotency = idempotencyOf(ctx, CaptureHoldRequestSchema, req);
      const answer = await holds.capture({
        accountId,
        programId: req.programId,
        holdId: req.holdId,
        amount: parseAmount(req.amount),
        destinationEntityId: req.destinationEntityId,
        description: parseText(req.description, "description"),
        ...(idempotency ? { idempotency } : {}),
        origin: originOf(ctx),
      });
      return respond(ctx, answer);
    },

    async releaseHold(req, ctx) {
      const { accountId } = principalOf(ctx);
      if (req.holdId === "") throw invalidArgument("hold_id is required");
      const idempotency = idempotencyOf(ctx, ReleaseHoldRequestSchema, req);
      const answer = await holds.release({
        accountId,
        programId: req.programId,
        holdId: req.holdId,
        ...(idempotency ? { idempotency } : {}),
        origin: originOf(ctx),
      });
      return respond(ctx, answer);
    },

    async getHold(req, ctx) {
      const { accountId } = principalOf(ctx);
      if (req.holdId === "") throw invalidArgument("hold_id is required");
      return { hold: holdToProto(await holds.get(accountId, req.programId, req.holdId)) };
    },

    async listHolds(req, ctx) {
      const { accountId } = principalOf(ctx);
      if (req.entityId === "") throw invalidArgument("entity_id is required");
      const status = Object.keys(HOLD_STATUS_OF).find((word) => HOLD_STATUS_OF[word] === req.status);
      if (req.status !== HoldStatus.UNSPECIFIED && status === undefined) {
        throw invalidArgument(`status must be one of ${Object.keys(HOLD_STATUS_OF).join(", ")}`, { field: "status" });
      }
      // The ledger decides whether the entity is the caller's: another account's answers 404.
      await ledger.ledger.getEntity({ programId: req.programId, entityId: req.entityId }, ledger.asAccount(accountId, originOf(ctx)));
      const page = parsePageRequest(req.limit, req.cursor, (id) => isId("hold", id));
      const rows = await holds.list(req.entityId, Object.assign({}, page, { status }));
      const result = toPage(rows, page, (row) => row.id);
      return { holds: result.items.map(holdToProto), page: result.page };
    },
  };
}
