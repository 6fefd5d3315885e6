import type { ServiceImpl } from "@connectrpc/connect";
import { invalidArgument, isId, parsePageRequest, principalOf, toPage, type Sql } from "@ledger/common";
import type { NotificationService } from "@ledger/proto/notification/v1/notification_pb.js";
import { deliveriesOfEvent, deliveryMessage, isDeliveryId, listDeliveries, resendDelivery } from "./deliveries.js";
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
      const { row, secret } = await createEndpoint(sql, deps.secretKey, {
        accountId,
        url: validateUrl(req.url, deps.allowHttp),
        name: req.name,
        description: req.description,
        eventTypes: req.eventTypes ? validateEventTypes(req.eventTypes.types) : null,
      });
      return { endpoint: endpointMessage(row), secret };
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
      const row = await updateEndpoint(sql, accountId, req.endpointId, change);
      return { endpoint: endpointMessage(row) };
    },

    async deleteEndpoint(req, ctx) {
      const { accountId } = principalOf(ctx);
      if (req.endpointId === "") throw invalidArgument("endpoint_id is required", { field: "endpoint_id" });
      await deleteEndpoint(sql, accountId, req.endpointId);
      return {};
    },

    async rollEndpointSecret(req, ctx) {
      const { accountId } = principalOf(ctx);
      if (req.endpointId === "") throw invalidArgument("endpoint_id is required", { field: "endpoint_id" });
      const overlap = req.expirePreviousInSeconds === undefined ? DEFAULT_ROLL_OVERLAP_SECONDS : Number(req.expirePreviousInSeconds);
      const secret = await rollSecret(sql, deps.secretKey, accountId, req.endpointId, overlap);
      return { endpointId: req.endpointId, secret };
    },

    async resendDelivery(req, ctx) {
      const { accountId } = principalOf(ctx);
      if (req.deliveryId === "") throw invalidArgument("delivery_id is required", { field: "delivery_id" });
      const deliveryId = await resendDelivery(sql, accountId, req.deliveryId);
      deps.wake();
      return { deliveryId };
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
