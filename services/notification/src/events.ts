import { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { JsonObject, MessageInitShape } from "@bufbuild/protobuf";
import { isId, MAX_TRACE_HEADER, newId, notFound, pipelinedTransaction, storedMetadata, type PageRequest, type Sql } from "@ledger/common";
import type { Event } from "@ledger/proto/events/v1/events_pb.js";
import type { EventSchema as ApiEventSchema } from "@ledger/proto/notification/v1/notification_pb.js";
import { deliveryBody, eventObjectId } from "./event-body.js";

// Longer is not a traceparent; the column is no place for whatever a producer put there.
function storableTraceparent(value: string): string {
  return value.length <= MAX_TRACE_HEADER ? value : "";
}

/**
 * Stores events once per id and, in the same transaction, queues one delivery for each of their
 * account's enabled destinations that subscribe to their type. A redelivered message finds its
 * event already there and changes nothing, so the consumer may ack it again safely. Many events
 * share one transaction, so ingestion keeps up with the ledger's group commit.
 * Returns how many deliveries were queued. `traceparentOf` gives the trace context stored with an
 * event for its delivery attempts: the storing span's when the service traces, else the event's own.
 */
export async function ingestEvents(
  sql: Sql,
  events: Event[],
  traceparentOf: (event: Event) => string = (event) => event.traceparent,
): Promise<number> {
  const unique = [...new Map(events.map((e) => [e.id, e])).values()];
  const rows = unique.map((event) => ({
    id: event.id,
    account_id: event.accountId,
    type: event.type,
    body: deliveryBody(event),
    object_id: eventObjectId(event),
    request_id: event.requestId.slice(0, 128),
    traceparent: storableTraceparent(traceparentOf(event)),
    created_at: event.created ? timestampDate(event.created) : new Date(),
  }));
  // One pipelined transaction that waits on Postgres twice at most: BEGIN goes out with the
  // statement that stores the events and matches them to destinations, and the deliveries'
  // insert with COMMIT (docs/decisions/pipelined-transactions.md).
  return pipelinedTransaction(sql, async (tx, writes) => {
    // The rows as one JSON parameter: binding a parameter per column of every row was most of
    // this service's socket writes under batch load (docs/decisions/event-consumer-batches.md).
    // A redelivered event conflicts, is not returned, and so queues nothing again.
    const matches = await tx<{ event_id: string; account_id: string; endpoint_id: string }[]>`
      with inserted as (
        insert into events (id, account_id, type, body, object_id, request_id, traceparent, created_at)
        select id, account_id, type, body, object_id, request_id, traceparent, created_at
        from json_to_recordset(${JSON.stringify(rows)}::text::json)
          as r(id text, account_id text, type text, body text, object_id text, request_id text, traceparent text, created_at timestamptz)
        on conflict (id) do nothing
        returning id, account_id, type)
      select i.id as event_id, i.account_id, e.id as endpoint_id
      from inserted i
      join endpoints e on e.account_id = i.account_id and e.enabled and e.deleted_at is null
        and (e.event_types is null or i.type = any(e.event_types))`;
    if (matches.length === 0) return 0;
    const deliveryIds = matches.map(() => newId("delivery"));
    // Due now, by the database clock, which every worker compares against.
    writes.push(
      tx`
        insert into deliveries (id, account_id, event_id, endpoint_id, status, next_attempt_at)
        select id, account_id, event_id, endpoint_id, 'pending', now()
        from unnest(${deliveryIds}::text[], ${matches.map((m) => m.account_id)}::text[],
                    ${matches.map((m) => m.event_id)}::text[], ${matches.map((m) => m.endpoint_id)}::text[])
          as d(id, account_id, event_id, endpoint_id)`.execute(),
    );
    return matches.length;
  });
}

interface EventRow {
  id: string;
  type: string;
  body: string;
  created_at: Date;
  total: number;
  succeeded: number;
  failed: number;
  pending: number;
}

// Events stored before metadata had a depth limit may carry more than the API can wrap in protobuf.
function storedData(data: JsonObject): JsonObject {
  const metadata = data["metadata"];
  return metadata && typeof metadata === "object" && !Array.isArray(metadata)
    ? Object.assign({}, data, { metadata: storedMetadata(metadata) })
    : data;
}

function eventMessage(row: EventRow, withData: boolean): MessageInitShape<typeof ApiEventSchema> {
  return {
    eventId: row.id,
    type: row.type,
    ...(withData ? { data: storedData((JSON.parse(row.body) as { data: JsonObject }).data) } : {}),
    createdAt: timestampFromDate(row.created_at),
    deliveries: { total: row.total, succeeded: row.succeeded, failed: row.failed, pending: row.pending },
  };
}

const SUMMARY = (sql: Sql) => sql`
  (select count(*)::int from deliveries d where d.event_id = e.id) as total,
  (select count(*)::int from deliveries d where d.event_id = e.id and d.status = 'succeeded') as succeeded,
  (select count(*)::int from deliveries d where d.event_id = e.id and d.status = 'failed') as failed,
  (select count(*)::int from deliveries d where d.event_id = e.id and d.status = 'pending') as pending`;

/** The longest object id GET /events?object_id= takes; every id the services make is far shorter. */
export const MAX_OBJECT_ID_LENGTH = 128;

/**
 * A page of the account's events, newest first (ids sort by creation), with delivery summaries;
 * only those about `objectId` when it is given (events_by_object serves that).
 */
export async function listEvents(
  sql: Sql,
  accountId: string,
  page: PageRequest,
  objectId = "",
): Promise<{ rows: EventRow[]; toMessage: (row: EventRow) => MessageInitShape<typeof ApiEventSchema> }> {
  const rows = await sql<EventRow[]>`
    select e.id, e.type, e.body, e.created_at, ${SUMMARY(sql)}
    from events e
    where e.account_id = ${accountId} ${objectId ? sql`and e.object_id = ${objectId}` : sql``}
      ${page.before ? sql`and e.id < ${page.before}` : sql``}
    order by e.id desc limit ${page.limit + 1}`;
  return { rows, toMessage: (row) => eventMessage(row, false) };
}

/** One event of the account with its data; 404 for a missing or foreign one. */
export async function getEvent(sql: Sql, accountId: string, eventId: string): Promise<MessageInitShape<typeof ApiEventSchema>> {
  if (!isId("event", eventId)) throw notFound("event", eventId);
  const [row] = await sql<EventRow[]>`
    select e.id, e.type, e.body, e.created_at, ${SUMMARY(sql)}
    from events e where e.id = ${eventId} and e.account_id = ${accountId}`;
  if (!row) throw notFound("event", eventId);
  return eventMessage(row, true);
}
