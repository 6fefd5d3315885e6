import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { isId, newId, notFound, ruleViolation, type PageRequest, type Sql, type Tx } from "@ledger/common";
import { DeliveryStatus, type DeliveryAttemptSchema, type DeliverySchema } from "@ledger/proto/notification/v1/notification_pb.js";
import { findEndpoint } from "./endpoints.js";

/** A deliveries row joined with its event's type. */
export interface DeliveryRow {
  id: string;
  endpoint_id: string;
  event_id: string;
  event_type: string;
  status: "pending" | "succeeded" | "failed";
  attempts: number;
  response_status: number | null;
  response_body: string | null;
  duration_ms: number | null;
  error: string | null;
  next_attempt_at: Date | null;
  created_at: Date;
  last_attempt_at: Date | null;
  lease_id: string | null;
}

const STATUS = { pending: DeliveryStatus.PENDING, succeeded: DeliveryStatus.SUCCEEDED, failed: DeliveryStatus.FAILED };

/** The proto shape of a delivery. A leased attempt's next_attempt_at is the lease, not a schedule. */
export function deliveryMessage(row: DeliveryRow): MessageInitShape<typeof DeliverySchema> {
  return {
    deliveryId: row.id,
    endpointId: row.endpoint_id,
    eventId: row.event_id,
    eventType: row.event_type,
    status: STATUS[row.status],
    attempts: row.attempts,
    responseStatus: row.response_status ?? 0,
    responseBody: row.response_body ?? "",
    durationMs: row.duration_ms ?? 0,
    error: row.error ?? "",
    ...(row.status === "pending" && row.next_attempt_at ? { nextAttemptAt: timestampFromDate(row.next_attempt_at) } : {}),
    createdAt: timestampFromDate(row.created_at),
    ...(row.last_attempt_at ? { lastAttemptAt: timestampFromDate(row.last_attempt_at) } : {}),
  };
}

const SELECT = (sql: Sql) => sql`
  select d.id, d.endpoint_id, d.event_id, e.type as event_type, d.status, d.attempts, d.response_status,
         d.response_body, d.duration_ms, d.error, d.next_attempt_at, d.created_at, d.last_attempt_at, d.lease_id
  from deliveries d join events e on e.id = d.event_id`;

/** A page of one destination's deliveries, newest first. */
export async function listDeliveries(sql: Sql, accountId: string, endpointId: string, page: PageRequest): Promise<DeliveryRow[]> {
  await findEndpoint(sql, accountId, endpointId);
  return sql<DeliveryRow[]>`
    ${SELECT(sql)}
    where d.endpoint_id = ${endpointId} and d.account_id = ${accountId} ${page.before ? sql`and d.id < ${page.before}` : sql``}
    order by d.id desc limit ${page.limit + 1}`;
}

/** Every delivery of one event, oldest first. */
export async function deliveriesOfEvent(sql: Sql, accountId: string, eventId: string): Promise<DeliveryRow[]> {
  return sql<DeliveryRow[]>`${SELECT(sql)} where d.event_id = ${eventId} and d.account_id = ${accountId} order by d.id`;
}

/**
 * Queues a new delivery of an earlier delivery's event to the same destination (POST /webhooks/resend, docs/webhooks.md#endpoints).
 * A deleted destination answers 404, like a missing one; a disabled one cannot receive it.
 */
export async function resendDelivery(tx: Tx, accountId: string, deliveryId: string): Promise<string> {
  if (!isId("delivery", deliveryId)) throw notFound("delivery", deliveryId);
  const [earlier] = await tx<{ event_id: string; endpoint_id: string }[]>`
    select event_id, endpoint_id from deliveries where id = ${deliveryId} and account_id = ${accountId}`;
  if (!earlier) throw notFound("delivery", deliveryId);
  const endpoint = await findEndpoint(tx, accountId, earlier.endpoint_id, true);
  if (!endpoint.enabled)
    throw ruleViolation("invalid_state", "the endpoint is disabled; enable it before resending", { endpoint_id: endpoint.id });
  const id = newId("delivery");
  await tx`
    insert into deliveries (id, account_id, event_id, endpoint_id, status, next_attempt_at)
    values (${id}, ${accountId}, ${earlier.event_id}, ${earlier.endpoint_id}, 'pending', now())`;
  return id;
}

/** Checks a delivery id inside a cursor. */
export const isDeliveryId = (id: string) => isId("delivery", id);

/** A delivery_attempts row with its place among the delivery's attempts. */
export interface AttemptRow {
  id: string;
  attempt: number;
  attempted_at: Date;
  succeeded: boolean;
  response_status: number | null;
  duration_ms: number;
  error: string | null;
}

/** A cursor of the attempts list carries an attempt's row id: a bigserial, so digits only. */
export const isAttemptId = (id: string): boolean => /^[1-9][0-9]{0,17}$/.test(id);

/** The proto shape of one attempt. */
export function attemptMessage(row: AttemptRow): MessageInitShape<typeof DeliveryAttemptSchema> {
  return {
    attempt: row.attempt,
    attemptedAt: timestampFromDate(row.attempted_at),
    succeeded: row.succeeded,
    responseStatus: row.response_status ?? 0,
    durationMs: row.duration_ms,
    error: row.error ?? "",
  };
}

/**
 * A page of one delivery's attempts, newest first (GET /webhooks/delivery/attempts); 404 for a
 * missing delivery or another account's. `attempt` numbers them from the first: a count over the
 * delivery's earlier attempts, which a retry schedule keeps to a handful.
 */
export async function listDeliveryAttempts(sql: Sql, accountId: string, deliveryId: string, page: PageRequest): Promise<AttemptRow[]> {
  if (!isDeliveryId(deliveryId)) throw notFound("delivery", deliveryId);
  const [delivery] = await sql<{ id: string }[]>`select id from deliveries where id = ${deliveryId} and account_id = ${accountId}`;
  if (!delivery) throw notFound("delivery", deliveryId);
  return sql<AttemptRow[]>`
    select a.id::text as id, a.attempted_at, a.succeeded, a.response_status, a.duration_ms, a.error,
           (select count(*)::int from delivery_attempts b where b.delivery_id = a.delivery_id and b.id <= a.id) as attempt
    from delivery_attempts a
    where a.delivery_id = ${deliveryId} ${page.before ? sql`and a.id < ${page.before}::bigint` : sql``}
    order by a.id desc limit ${page.limit + 1}`;
}
