import { timestampDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import { invalidArgument } from "@ledger/common";
import {
  DeliveryStatusSchema,
  type Delivery,
  type DeliveryAttempt,
  type Endpoint,
  type Event,
} from "@ledger/proto/notification/v1/notification_pb.js";
import { arrayField, booleanField, limitParam, optionalParam, requiredParam, stringField, type Fields } from "./input.js";
import { enumWord, renderPage } from "./render.js";
import type { Route } from "./routes.js";

// REST paths of webhook destinations and events (docs/webhooks.md#endpoints), mapped
// onto notification.v1.NotificationService. They are account-scoped: no program_id header.
// The JSON shapes of these objects live here too, beside the only routes that write them.

const PAGE = ["limit", "cursor"] as const;

function iso(ts: Timestamp | undefined): string | null {
  return ts ? timestampDate(ts).toISOString() : null;
}

/** A destination, never with its secret: only creation and roll add that. */
export function renderEndpoint(endpoint: Endpoint) {
  return {
    endpoint_id: endpoint.endpointId,
    url: endpoint.url,
    name: endpoint.name,
    description: endpoint.description,
    enabled: endpoint.enabled,
    event_types: endpoint.eventTypes ? endpoint.eventTypes.types : null,
    max_concurrency: endpoint.maxConcurrency,
    created_at: iso(endpoint.createdAt),
    updated_at: iso(endpoint.updatedAt),
  };
}

/** A delivery with the outcome of its latest attempt. */
export function renderDelivery(delivery: Delivery) {
  return {
    delivery_id: delivery.deliveryId,
    endpoint_id: delivery.endpointId,
    event_id: delivery.eventId,
    event_type: delivery.eventType,
    status: enumWord(DeliveryStatusSchema, delivery.status),
    attempts: delivery.attempts,
    response_status: delivery.responseStatus || null,
    response_body: delivery.responseBody || null,
    duration_ms: delivery.attempts > 0 ? delivery.durationMs : null,
    error: delivery.error || null,
    next_attempt_at: iso(delivery.nextAttemptAt),
    last_attempt_at: iso(delivery.lastAttemptAt),
    created_at: iso(delivery.createdAt),
  };
}

/** One attempt of a delivery, as the worker recorded it. */
function renderAttempt(attempt: DeliveryAttempt) {
  return {
    attempt: attempt.attempt,
    attempted_at: iso(attempt.attemptedAt),
    succeeded: attempt.succeeded,
    response_status: attempt.responseStatus || null,
    duration_ms: attempt.durationMs,
    error: attempt.error || null,
  };
}

/** The longest `object_id` GET /events takes (the notification service checks the same). */
const MAX_OBJECT_ID_LENGTH = 128;

function objectIdParam(query: Fields): string {
  const value = optionalParam(query, "object_id");
  if (value.length > MAX_OBJECT_ID_LENGTH)
    throw invalidArgument(`query parameter object_id is at most ${MAX_OBJECT_ID_LENGTH} characters`, { parameter: "object_id" });
  return value;
}

function renderSummary(event: Event) {
  const d = event.deliveries;
  return { total: d?.total ?? 0, succeeded: d?.succeeded ?? 0, failed: d?.failed ?? 0, pending: d?.pending ?? 0 };
}

/** `event_types`: absent leaves it alone (undefined), null means all, else a list of strings. */
function eventTypesField(body: Fields): { present: false } | { present: true; types: string[] | null } {
  if (!("event_types" in body)) return { present: false };
  const list = arrayField(body, "event_types");
  if (list === undefined) return { present: true, types: null };
  if (!list.every((t): t is string => typeof t === "string"))
    throw invalidArgument("event_types must be an array of strings or null", { field: "event_types" });
  return { present: true, types: list };
}

function optionalString(body: Fields, name: string): string | undefined {
  return body[name] === undefined ? undefined : stringField(body, name);
}

function secondsField(body: Fields, name: string): bigint | undefined {
  const value = body[name];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 0) {
    throw invalidArgument(`${name} must be a whole number of seconds, 0 or more`, { field: name });
  }
  return BigInt(value);
}

/**
 * `max_concurrency`: a whole number, passed on for the service to check its range (1 to 256);
 * one outside int32 could not even be encoded, so it is refused here with the same message.
 */
function maxConcurrencyField(body: Fields): { maxConcurrency?: number } {
  const value = body["max_concurrency"];
  if (value === undefined || value === null) return {};
  if (typeof value !== "number" || !Number.isInteger(value) || Math.abs(value) > 2 ** 31 - 1) {
    throw invalidArgument("max_concurrency must be a whole number from 1 to 256", { field: "max_concurrency" });
  }
  return { maxConcurrency: value };
}

/** Every REST path of the notification service. */
export const notificationRoutes: Route[] = [
  {
    method: "POST",
    path: "/webhooks",
    body: ["url", "name", "description", "event_types", "max_concurrency"],
    async handle({ body, call }, { notification }) {
      const types = eventTypesField(body);
      const res = await notification.createEndpoint(
        {
          url: stringField(body, "url"),
          name: stringField(body, "name"),
          description: stringField(body, "description"),
          ...(types.present && types.types ? { eventTypes: { types: types.types } } : {}),
          ...maxConcurrencyField(body),
        },
        call,
      );
      return { endpoint: Object.assign({}, renderEndpoint(res.endpoint!), { secret: res.secret }) };
    },
  },
  {
    method: "GET",
    path: "/webhooks",
    query: PAGE,
    async handle({ query, call }, { notification }) {
      const res = await notification.listEndpoints({ limit: limitParam(query), cursor: optionalParam(query, "cursor") }, call);
      return { endpoints: res.endpoints.map(renderEndpoint), pagination: renderPage(res.page) };
    },
  },
  {
    method: "GET",
    path: "/webhook",
    query: ["id"],
    async handle({ query, call }, { notification }) {
      const res = await notification.getEndpoint({ endpointId: requiredParam(query, "id") }, call);
      const s = res.stats;
      return {
        endpoint: renderEndpoint(res.endpoint!),
        stats: { total: s?.total ?? 0n, succeeded: s?.succeeded ?? 0n, failed: s?.failed ?? 0n, avg_ms: s?.avgMs ?? 0n },
      };
    },
  },
  {
    method: "PUT",
    path: "/webhooks",
    body: ["endpoint_id", "url", "name", "enabled", "event_types", "max_concurrency"],
    async handle({ body, call }, { notification }) {
      const types = eventTypesField(body);
      const url = optionalString(body, "url");
      const name = optionalString(body, "name");
      const enabled = booleanField(body, "enabled");
      const res = await notification.updateEndpoint(
        {
          endpointId: stringField(body, "endpoint_id"),
          ...(url !== undefined ? { url } : {}),
          ...(name !== undefined ? { name } : {}),
          ...(enabled !== undefined ? { enabled } : {}),
          ...maxConcurrencyField(body),
          ...(types.present
            ? {
                subscription: types.types
                  ? { case: "eventTypes" as const, value: { types: types.types } }
                  : { case: "allEventTypes" as const, value: true },
              }
            : {}),
        },
        call,
      );
      return { endpoint: renderEndpoint(res.endpoint!) };
    },
  },
  {
    method: "DELETE",
    path: "/webhooks",
    query: ["endpoint_id"],
    async handle({ query, call }, { notification }) {
      await notification.deleteEndpoint({ endpointId: requiredParam(query, "endpoint_id") }, call);
      return {};
    },
  },
  {
    method: "POST",
    path: "/webhooks/roll",
    body: ["endpoint_id", "expire_previous_in_seconds"],
    async handle({ body, call }, { notification }) {
      const expire = secondsField(body, "expire_previous_in_seconds");
      const res = await notification.rollEndpointSecret(
        { endpointId: stringField(body, "endpoint_id"), ...(expire !== undefined ? { expirePreviousInSeconds: expire } : {}) },
        call,
      );
      return { endpoint: { endpoint_id: res.endpointId, secret: res.secret } };
    },
  },
  {
    method: "POST",
    path: "/webhooks/resend",
    body: ["delivery_id"],
    async handle({ body, call }, { notification }) {
      const res = await notification.resendDelivery({ deliveryId: stringField(body, "delivery_id") }, call);
      return { delivery_id: res.deliveryId };
    },
  },
  {
    method: "GET",
    path: "/webhooks/deliveries",
    query: ["endpoint_id", ...PAGE],
    async handle({ query, call }, { notification }) {
      const res = await notification.listDeliveries(
        { endpointId: requiredParam(query, "endpoint_id"), limit: limitParam(query), cursor: optionalParam(query, "cursor") },
        call,
      );
      return { deliveries: res.deliveries.map(renderDelivery), pagination: renderPage(res.page) };
    },
  },
  {
    method: "GET",
    path: "/webhooks/delivery/attempts",
    query: ["delivery_id", ...PAGE],
    async handle({ query, call }, { notification }) {
      const res = await notification.listDeliveryAttempts(
        { deliveryId: requiredParam(query, "delivery_id"), limit: limitParam(query), cursor: optionalParam(query, "cursor") },
        call,
      );
      return { attempts: res.attempts.map(renderAttempt), pagination: renderPage(res.page) };
    },
  },
  {
    method: "GET",
    path: "/events",
    query: ["object_id", ...PAGE],
    async handle({ query, call }, { notification }) {
      const res = await notification.listEvents(
        { limit: limitParam(query), cursor: optionalParam(query, "cursor"), objectId: objectIdParam(query) },
        call,
      );
      return {
        events: res.events.map((e) => ({ event_id: e.eventId, type: e.type, created_at: iso(e.createdAt), deliveries: renderSummary(e) })),
        pagination: renderPage(res.page),
      };
    },
  },
  {
    method: "GET",
    path: "/event",
    query: ["id"],
    async handle({ query, call }, { notification }) {
      const res = await notification.getEvent({ eventId: requiredParam(query, "id") }, call);
      const e = res.event!;
      return {
        event: { event_id: e.eventId, type: e.type, created_at: iso(e.createdAt), data: e.data ?? {}, deliveries: renderSummary(e) },
        deliveries: res.deliveries.map(renderDelivery),
      };
    },
  },
];
