import type { DescMessage, MessageInitShape, MessageShape } from "@bufbuild/protobuf";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import {
  invalidArgument,
  isId,
  parsePageRequest,
  principalOf,
  runIdempotent,
  toPage,
  transaction,
  type Sql,
  type StoredResponseCodec,
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
import {
  attemptMessage,
  deliveriesOfEvent,
  deliveryMessage,
  isAttemptId,
  isDeliveryId,
  listDeliveries,
  listDeliveryAttempts,
  resendDelivery,
} from "./deliveries.js";
import {
  createEndpoint,
  deleteEndpoint,
  endpointMessage,
  endpointStats,
  findEndpoint,
  listEndpoints,
  rollSecret,
  updateEndpoint,
  validateEventTypes,
  validateMaxConcurrency,
  DEFAULT_MAX_CONCURRENCY,
  validateUrl,
  type EndpointChange,
  type UrlPolicy,
} from "./endpoints.js";
import { getEvent, listEvents, MAX_OBJECT_ID_LENGTH } from "./events.js";
import { isSealed, open, seal } from "./secrets.js";

/** What the RPC handlers need. */
export interface NotificationDeps {
  sql: Sql;
  secretKey: Buffer;
  /** What destination URLs may be. */
  urlPolicy: UrlPolicy;
  /** Tells the delivery loop that a resend queued work. */
  wake: () => void;
}

/** The default overlap of a roll: a day for receivers to switch (docs/webhooks.md#signing-and-verification). */
const DEFAULT_ROLL_OVERLAP_SECONDS = 86_400;

/** Every method of the NotificationService; eventHandlers and endpointHandlers each give a part. */
type NotificationHandlers = ServiceImpl<typeof NotificationService>;
type Mutate = ReturnType<typeof idempotentWrite>;

/**
 * A write, once per Idempotency-Key (docs/api.md#idempotency), in one transaction, with the shared
 * mechanism of @ledger/common. A replay returns exactly what the first call did, so the replay
 * of a create or a roll shows the secret that call made (not the current one). Stored responses
 * are sealed with the key that encrypts signing secrets, so no secret rests in clear.
 */
function idempotentWrite(deps: NotificationDeps) {
  const { sql } = deps;
  // A transaction that loses a deadlock runs again: the client never sees the collision.
  const begin = <T>(fn: (tx: Tx) => Promise<T>) => transaction(sql, fn);
  const storedResponses: StoredResponseCodec = {
    seal: (response, aad) => seal(deps.secretKey, `idempotency\u0000${aad}`, response),
    // Rows stored before responses were sealed are replayed as they are: they hold no secret
    // (a create or roll of then was stored without it, so its replay lacks it too).
    open: (stored, aad) => (isSealed(stored) ? open(deps.secretKey, `idempotency\u0000${aad}`, stored) : stored),
  };

  return <I extends DescMessage, O extends DescMessage>(
    ctx: HandlerContext,
    accountId: string,
    requestSchema: I,
    request: MessageShape<I>,
    responseSchema: O,
    effect: (tx: Tx) => Promise<MessageInitShape<O>>,
  ) => runIdempotent({ ctx, begin, accountId, requestSchema, request, responseSchema, effect, codec: storedResponses });
}

/** Maps NotificationService RPCs onto the store; every call acts for the caller's account only. */
export function createNotificationService(deps: NotificationDeps): NotificationHandlers {
  const mutate = idempotentWrite(deps);
  return Object.assign({}, eventHandlers(deps, mutate), endpointHandlers(deps, mutate));
}

/** The event log and the deliveries of its events. */
function eventHandlers(
  deps: NotificationDeps,
  mutate: Mutate,
): Pick<NotificationHandlers, "listEvents" | "getEvent" | "resendDelivery" | "listDeliveries" | "listDeliveryAttempts"> {
  const { sql } = deps;
  return {
    async listEvents(req, ctx) {
      const { accountId } = principalOf(ctx);
      const page = parsePageRequest(req.limit, req.cursor, (id) => isId("event", id));
      if (req.objectId.length > MAX_OBJECT_ID_LENGTH)
        throw invalidArgument(`object_id is at most ${MAX_OBJECT_ID_LENGTH} characters`, { field: "object_id" });
      const { rows, toMessage } = await listEvents(sql, accountId, page, req.objectId);
      const result = toPage(rows, page, (row) => row.id);
      return { events: result.items.map(toMessage), page: result.page };
    },

    async getEvent(req, ctx) {
      const { accountId } = principalOf(ctx);
      const event = await getEvent(sql, accountId, req.eventId);
      const deliveries = await deliveriesOfEvent(sql, accountId, req.eventId);
      return { event, deliveries: deliveries.map(deliveryMessage) };
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

    async listDeliveryAttempts(req, ctx) {
      const { accountId } = principalOf(ctx);
      if (req.deliveryId === "") throw invalidArgument("delivery_id is required", { field: "delivery_id" });
      const page = parsePageRequest(req.limit, req.cursor, isAttemptId);
      const result = toPage(await listDeliveryAttempts(sql, accountId, req.deliveryId, page), page, (row) => row.id);
      return { attempts: result.items.map(attemptMessage), page: result.page };
    },
  };
}

/** The webhook destinations and their signing secrets. */
function endpointHandlers(
  deps: NotificationDeps,
  mutate: Mutate,
): Pick<
  NotificationHandlers,
  "createEndpoint" | "listEndpoints" | "getEndpoint" | "updateEndpoint" | "deleteEndpoint" | "rollEndpointSecret"
> {
  const { sql } = deps;
  return {
    async createEndpoint(req, ctx) {
      const { accountId } = principalOf(ctx);
      const input = {
        accountId,
        url: validateUrl(req.url, deps.urlPolicy),
        name: req.name,
        description: req.description,
        eventTypes: req.eventTypes ? validateEventTypes(req.eventTypes.types) : null,
        maxConcurrency: req.maxConcurrency === undefined ? DEFAULT_MAX_CONCURRENCY : validateMaxConcurrency(req.maxConcurrency),
      };
      return mutate(ctx, accountId, CreateEndpointRequestSchema, req, CreateEndpointResponseSchema, async (tx) => {
        const { row, secret } = await createEndpoint(tx, deps.secretKey, input);
        return { endpoint: endpointMessage(row), secret };
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
      if (req.url !== undefined) change.url = validateUrl(req.url, deps.urlPolicy);
      if (req.name !== undefined) change.name = req.name;
      if (req.enabled !== undefined) change.enabled = req.enabled;
      if (req.maxConcurrency !== undefined) change.maxConcurrency = validateMaxConcurrency(req.maxConcurrency);
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
      return mutate(ctx, accountId, RollEndpointSecretRequestSchema, req, RollEndpointSecretResponseSchema, async (tx) => ({
        endpointId: req.endpointId,
        secret: await rollSecret(tx, deps.secretKey, accountId, req.endpointId, overlap),
      }));
    },
  };
}
