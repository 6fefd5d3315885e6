import { create, fromBinary, toBinary, type DescMessage, type MessageInitShape, type MessageShape } from "@bufbuild/protobuf";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import {
  claimIdempotencyKey,
  completeIdempotencyKey,
  IDEMPOTENT_REPLAYED_HEADER,
  idempotencyKeyOf,
  invalidArgument,
  isId,
  parsePageRequest,
  principalOf,
  requestFingerprint,
  runIdempotent,
  toPage,
  type Sql,
  type Tx,
} from "@ledger/common";
import {
  CreateEndpointRequestSchema,
  CreateEndpointResponseSchema,
  DeleteEndpointRequestSchema,
  DeleteEndpointResponseSchema,
  ResendDeliveryRequestSchema,
  ResendDeliveryResponseSchema,
  RollEndpointSecretRequestSchema,
  RollEndpointSecretResponseSchema,
  UpdateEndpointRequestSchema,
  UpdateEndpointResponseSchema,
  type NotificationService,
} from "@ledger/proto/notification/v1/notification_pb.js";
import { deliveriesOfEvent, deliveryMessage, isDeliveryId, listDeliveries, resendDelivery } from "./deliveries.js";
import {
  createEndpoint,
  currentSecret,
  deleteEndpoint,
  endpointMessage,
  endpointStats,
  findEndpoint,
  listEndpoints,
  rollSecret,
  updateEndpoint,
  validateEventTypes,
  validateUrl,
  type EndpointChange,
} from "./endpoints.js";
import { getEvent, listEvents } from "./events.js";

/** What the RPC handlers need. */
export interface NotificationDeps {
  sql: Sql;
  secretKey: Buffer;
  allowHttp: boolean;
  /** Tells the delivery loop that a resend queued work. */
  wake: () => void;
}

/** The default overlap of a roll: a day for receivers to switch (DESIGN.md section 4). */
const DEFAULT_ROLL_OVERLAP_SECONDS = 86_400;

/** Maps NotificationService RPCs onto the store; every call acts for the caller's account only. */
export function createNotificationService(deps: NotificationDeps): ServiceImpl<typeof NotificationService> {
  const { sql } = deps;
  const begin = <T>(fn: (tx: Tx) => Promise<T>) => sql.begin(fn) as Promise<T>;

  /** A write, once per Idempotency-Key (DESIGN.md section 5), in one transaction. */
  const mutate = <I extends DescMessage, O extends DescMessage>(
    ctx: HandlerContext,
    accountId: string,
    requestSchema: I,
    request: MessageShape<I>,
    responseSchema: O,
    effect: (tx: Tx) => Promise<MessageInitShape<O>>,
  ) => runIdempotent({ ctx, begin, accountId, requestSchema, request, responseSchema, effect });

  /**
   * A write whose response shows a signing secret. The stored response leaves the secret out; a
   * replay reads the endpoint's current secret (encrypted at rest) instead of a copy in clear.
   */
  const mutateWithSecret = async <I extends DescMessage, O extends DescMessage>(
    ctx: HandlerContext,
    accountId: string,
    requestSchema: I,
    request: MessageShape<I>,
    responseSchema: O,
    endpointIdOf: (response: MessageShape<O>) => string,
    effect: (tx: Tx) => Promise<{ response: MessageInitShape<O>; secret: string }>,
  ): Promise<MessageShape<O>> => {
    const key = idempotencyKeyOf(ctx);
    return begin(async (tx) => {
      if (key !== undefined) {
        const fingerprint = requestFingerprint(`${ctx.service.typeName}/${ctx.method.name}`, requestSchema, request);
        const claim = await claimIdempotencyKey(tx, accountId, key, fingerprint);
        if (claim.kind === "replay") {
          ctx.responseHeader.set(IDEMPOTENT_REPLAYED_HEADER, "true");
          const stored = fromBinary(responseSchema, claim.response);
          return Object.assign(stored, { secret: await currentSecret(tx, deps.secretKey, accountId, endpointIdOf(stored)) });
        }
      }
      const { response, secret } = await effect(tx);
      const message = create(responseSchema, response);
      if (key !== undefined) await completeIdempotencyKey(tx, accountId, key, toBinary(responseSchema, message));
      return Object.assign(message, { secret });
    });
  };

  return {
    async listEvents(req, ctx) {
      const { accountId } = principalOf(ctx);
      const page = parsePageRequest(req.limit, req.cursor, (id) => isId("event", id));
      const { rows, toMessage } = await listEvents(sql, accountId, page);
      const result = toPage(rows, page, (row) => row.id);
      return { events: result.items.map(toMessage), page: result.page };
    },

    async getEvent(req, ctx) {
      const { accountId } = principalOf(ctx);
      const event = await getEvent(sql, accountId, req.eventId);
      const deliveries = await deliveriesOfEvent(sql, accountId, req.eventId);
      return { event, deliveries: deliveries.map(deliveryMessage) };
    },

    async createEndpoint(req, ctx) {
      const { accountId } = principalOf(ctx);
      const input = {
        accountId,
        url: validateUrl(req.url, deps.allowHttp),
        name: req.name,
        description: req.description,
        eventTypes: req.eventTypes ? validateEventTypes(req.eventTypes.types) : null,
      };
      return mutateWithSecret(ctx, accountId, CreateEndpointRequestSchema, req, CreateEndpointResponseSchema, (res) => res.endpoint?.endpointId ?? "", async (tx) => {
        const { row, secret } = await createEndpoint(tx, deps.secretKey, input);
        return { response: { endpoint: endpointMessage(row) }, secret };
      });
    },

    async listEndpoints(req, ctx) {
      const { accountId } = principalOf(ctx);
      const page = parsePageRequest(req.limit, req.cursor, (id) => isId("endpoint", id));
      const result = toPage(await listEndpoints(sql, accountId, page), page, (row) => row.id);
      return { endpoints: result.items.map(endpointMessage), page: result.page };
    },

    async getEndpoint(req, ctx) {
      const { accountId } = principalOf(ctx);
      const row = await findEndpoint(sql, accountId, req.endpointId);
      return { endpoint: endpointMessage(row), stats: await endpointStats(sql, row.id) };
    },

    async updateEndpoint(req, ctx) {
      const { accountId } = principalOf(ctx);
      if (req.endpointId === "") throw invalidArgument("endpoint_id is required", { field: "endpoint_id" });
      const change: EndpointChange = {};
      if (req.url !== undefined) change.url = validateUrl(req.url, deps.allowHttp);
      if (req.name !== undefined) change.name = req.name;
      if (req.enabled !== undefined) change.enabled = req.enabled;
      if (req.subscription.case === "eventTypes") change.eventTypes = validateEventTypes(req.subscription.value.types);
      if (req.subscription.case === "allEventTypes") {
        if (!req.subscription.value) throw invalidArgument("all_event_types can only be true", { field: "event_types" });
        change.eventTypes = null;
      }
      return mutate(ctx, accountId, UpdateEndpointRequestSchema, req, UpdateEndpointResponseSchema, async (tx) => ({
        endpoint: endpointMessage(await updateEndpoint(tx, accountId, req.endpointId, change)),
      }));
    },

    async deleteEndpoint(req, ctx) {
      const { accountId } = principalOf(ctx);
      if (req.endpointId === "") throw invalidArgument("endpoint_id is required", { field: "endpoint_id" });
      return mutate(ctx, accountId, DeleteEndpointRequestSchema, req, DeleteEndpointResponseSchema, async (tx) => {
        await deleteEndpoint(tx, accountId, req.endpointId);
        return {};
      });
    },

    async rollEndpointSecret(req, ctx) {
      const { accountId } = principalOf(ctx);
      if (req.endpointId === "") throw invalidArgument("endpoint_id is required", { field: "endpoint_id" });
      const overlap = req.expirePreviousInSeconds === undefined ? DEFAULT_ROLL_OVERLAP_SECONDS : Number(req.expirePreviousInSeconds);
      return mutateWithSecret(ctx, accountId, RollEndpointSecretRequestSchema, req, RollEndpointSecretResponseSchema, (res) => res.endpointId, async (tx) => ({
        response: { endpointId: req.endpointId },
        secret: await rollSecret(tx, deps.secretKey, accountId, req.endpointId, overlap),
      }));
    },

    async resendDelivery(req, ctx) {
      const { accountId } = principalOf(ctx);
      if (req.deliveryId === "") throw invalidArgument("delivery_id is required", { field: "delivery_id" });
      const response = await mutate(ctx, accountId, ResendDeliveryRequestSchema, req, ResendDeliveryResponseSchema, async (tx) => ({
        deliveryId: await resendDelivery(tx, accountId, req.deliveryId),
      }));
      deps.wake();
      return response;
    },

    async listDeliveries(req, ctx) {
      const { accountId } = principalOf(ctx);
      if (req.endpointId === "") throw invalidArgument("endpoint_id is required", { field: "endpoint_id" });
      const page = parsePageRequest(req.limit, req.cursor, isDeliveryId);
      const result = toPage(await listDeliveries(sql, accountId, req.endpointId, page), page, (row) => row.id);
      return { deliveries: result.items.map(deliveryMessage), page: result.page };
    },
  };
}
