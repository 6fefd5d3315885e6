import { isIP } from "node:net";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { invalidArgument, isId, newId, notFound, parseText, type PageRequest, type Sql, type Tx } from "@ledger/common";
import type { EndpointSchema, EndpointStatsSchema } from "@ledger/proto/notification/v1/notification_pb.js";
import { isBlockedAddress } from "./address-policy.js";
import { decryptSecret, encryptSecret, generateSecret } from "./secrets.js";

/** Every event type (docs/webhooks.md#how-events-become-deliveries); a subscription may name only these. */
export const EVENT_TYPES = [
  "transaction.created",
  "transaction.posted",
  "transaction.reversed",
  "transaction.failed",
  "transaction.canceled",
  "transaction.disputed",
  "hold.created",
  "hold.captured",
  "hold.released",
  "entity.updated",
  "balance.alert_triggered",
  "balance.alert_cleared",
] as const;

/** An endpoints row, without its secrets. */
export interface EndpointRow {
  id: string;
  account_id: string;
  url: string;
  name: string;
  description: string;
  enabled: boolean;
  event_types: string[] | null;
  max_concurrency: number;
  created_at: Date;
  updated_at: Date;
}

const COLUMNS = [
  "id",
  "account_id",
  "url",
  "name",
  "description",
  "enabled",
  "event_types",
  "max_concurrency",
  "created_at",
  "updated_at",
] as const;

/**
 * Attempts in flight to one destination at once when its creator did not say
 * (docs/webhooks.md#retries-and-delivery-states). A destination that answers at once gets as many
 * deliveries a second as this many attempts cover round trips; 32 held one process well below
 * what 128 reaches on the same machine (docs/decisions/webhook-delivery-turns.md).
 */
export const DEFAULT_MAX_CONCURRENCY = 128;
/** The most a destination may ask for: past it one destination could take a whole process. */
export const MAX_MAX_CONCURRENCY = 256;

/** A destination's concurrency cap: a whole number from 1 to 256. */
export function validateMaxConcurrency(value: number): number {
  if (!Number.isInteger(value) || value < 1 || value > MAX_MAX_CONCURRENCY) {
    throw invalidArgument(`max_concurrency must be a whole number from 1 to ${MAX_MAX_CONCURRENCY}`, { field: "max_concurrency" });
  }
  return value;
}

/** The proto shape of an endpoint. */
export function endpointMessage(row: EndpointRow): MessageInitShape<typeof EndpointSchema> {
  return {
    endpointId: row.id,
    url: row.url,
    name: row.name,
    description: row.description,
    enabled: row.enabled,
    ...(row.event_types ? { eventTypes: { types: row.event_types } } : {}),
    maxConcurrency: row.max_concurrency,
    createdAt: timestampFromDate(row.created_at),
    updatedAt: timestampFromDate(row.updated_at),
  };
}

/** What a destination URL may be: the service's WEBHOOK_ALLOW_HTTP and WEBHOOK_ALLOW_PRIVATE_NETWORKS. */
export interface UrlPolicy {
  allowHttp: boolean;
  allowPrivateNetworks: boolean;
}

/**
 * URL rules, checked when a destination is written. A host that is an IP address is checked
 * against the address policy now, so an address deliveries may never reach is refused at once
 * (the URL parser has already turned 2130706433 or [::127.0.0.1] into its plain form); a host
 * name is resolved and checked at every attempt.
 */
export function validateUrl(raw: string, policy: UrlPolicy): string {
  if (raw === "") throw invalidArgument("url is required", { field: "url" });
  if (raw.length > 2048) throw invalidArgument("url must be at most 2048 characters", { field: "url" });
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw invalidArgument("url must be an absolute URL such as https://example.com/webhooks", { field: "url" });
  }
  if (url.protocol !== "https:" && !(policy.allowHttp && url.protocol === "http:")) {
    throw invalidArgument("url must use https", { field: "url" });
  }
  if (url.username || url.password) throw invalidArgument("url must not contain credentials", { field: "url" });
  if (url.hash) throw invalidArgument("url must not contain a fragment", { field: "url" });
  const host = url.hostname.replace(/^\[|\]$/g, "");
  if (!policy.allowPrivateNetworks && isIP(host) && isBlockedAddress(host)) {
    throw invalidArgument("url must not point at a loopback, private, link-local or other non-public address", { field: "url" });
  }
  return url.toString();
}

/** A subscription list: known types, no repeats, at least one (null, not [], means all). */
export function validateEventTypes(types: string[]): string[] {
  if (types.length === 0)
    throw invalidArgument("event_types must name at least one type; send null or omit it for all events", { field: "event_types" });
  const unknown = types.filter((t) => !(EVENT_TYPES as readonly string[]).includes(t));
  if (unknown.length > 0) {
    throw invalidArgument(`unknown event type ${JSON.stringify(unknown[0])}; expected one of: ${EVENT_TYPES.join(", ")}`, {
      field: "event_types",
    });
  }
  return [...new Set(types)];
}

/** Inserts a destination and returns it with its secret, shown this once. */
export async function createEndpoint(
  sql: Tx,
  key: Buffer,
  input: { accountId: string; url: string; name: string; description: string; eventTypes: string[] | null; maxConcurrency: number },
): Promise<{ row: EndpointRow; secret: string }> {
  const id = newId("endpoint");
  const secret = generateSecret();
  // A generated name tells destinations apart in a list: the host and a piece of the id.
  const name = parseText(input.name, "name", { max: 200 }) || `${new URL(input.url).hostname} ${id.slice(-6)}`;
  const [row] = await sql<EndpointRow[]>`
    insert into endpoints (id, account_id, url, name, description, event_types, max_concurrency, secret)
    values (${id}, ${input.accountId}, ${input.url}, ${name}, ${parseText(input.description, "description", { max: 1000 })},
            ${input.eventTypes}, ${input.maxConcurrency}, ${encryptSecret(key, id, secret)})
    returning ${sql(COLUMNS)}`;
  return { row: row!, secret };
}

/**
 * One live destination of the account, locked when `lock` is set; 404 otherwise.
 * The lock is FOR NO KEY UPDATE, not FOR UPDATE: rows that reference the destination (a worker
 * inserting an attempt, the consumer queueing a delivery) take a KEY SHARE lock on it, which FOR
 * UPDATE would block. A worker holds its delivery row while it inserts the attempt, and disabling
 * holds the destination while it ends that delivery: with FOR UPDATE each waited for the other.
 */
export async function findEndpoint(sql: Sql | Tx, accountId: string, endpointId: string, lock = false): Promise<EndpointRow> {
  if (!isId("endpoint", endpointId)) throw notFound("endpoint", endpointId);
  const rows = lock
    ? await sql<
        EndpointRow[]
      >`select ${sql(COLUMNS)} from endpoints where id = ${endpointId} and account_id = ${accountId} and deleted_at is null for no key update`
    : await sql<
        EndpointRow[]
      >`select ${sql(COLUMNS)} from endpoints where id = ${endpointId} and account_id = ${accountId} and deleted_at is null`;
  if (!rows[0]) throw notFound("endpoint", endpointId);
  return rows[0];
}

/** A page of the account's live destinations, newest first. */
export async function listEndpoints(sql: Sql, accountId: string, page: PageRequest): Promise<EndpointRow[]> {
  return sql<EndpointRow[]>`
    select ${sql(COLUMNS)} from endpoints
    where account_id = ${accountId} and deleted_at is null ${page.before ? sql`and id < ${page.before}` : sql``}
    order by id desc limit ${page.limit + 1}`;
}

/** Attempts of the last 7 days, the `stats` of GET /webhook (docs/webhooks.md#endpoints). */
export async function endpointStats(sql: Sql, endpointId: string): Promise<MessageInitShape<typeof EndpointStatsSchema>> {
  const [row] = await sql<{ total: bigint; succeeded: bigint; failed: bigint; avg_ms: bigint }[]>`
    select count(*)::int8 as total,
           count(*) filter (where succeeded)::int8 as succeeded,
           count(*) filter (where not succeeded)::int8 as failed,
           coalesce(round(avg(duration_ms)), 0)::int8 as avg_ms
    from delivery_attempts
    where endpoint_id = ${endpointId} and attempted_at > now() - interval '7 days'`;
  return { total: row!.total, succeeded: row!.succeeded, failed: row!.failed, avgMs: row!.avg_ms };
}

/** What PUT /webhooks may change; undefined leaves a field as it is. */
export interface EndpointChange {
  url?: string;
  name?: string;
  enabled?: boolean;
  /** null subscribes to every type. */
  eventTypes?: string[] | null;
  maxConcurrency?: number;
}

/**
 * Applies a change. Disabling ends the destination's pending deliveries as `endpoint_disabled`
 * in the same transaction (docs/webhooks.md#retries-and-delivery-states): re-enabling later does not replay them.
 */
export async function updateEndpoint(tx: Tx, accountId: string, endpointId: string, change: EndpointChange): Promise<EndpointRow> {
  if (change.name !== undefined) {
    parseText(change.name, "name", { max: 200 });
    if (change.name === "") throw invalidArgument("name must not be empty", { field: "name" });
  }
  const current = await findEndpoint(tx, accountId, endpointId, true);
  const [row] = await tx<EndpointRow[]>`
    update endpoints set
      url = ${change.url ?? current.url},
      name = ${change.name ?? current.name},
      enabled = ${change.enabled ?? current.enabled},
      event_types = ${change.eventTypes === undefined ? current.event_types : change.eventTypes},
      max_concurrency = ${change.maxConcurrency ?? current.max_concurrency},
      updated_at = now()
    where id = ${endpointId}
    returning ${tx(COLUMNS)}`;
  if (current.enabled && change.enabled === false) await stopPending(tx, endpointId, "endpoint_disabled");
  return row!;
}

/** Deletes a destination: it disappears from the API and its pending deliveries end. */
export async function deleteEndpoint(tx: Tx, accountId: string, endpointId: string): Promise<void> {
  await findEndpoint(tx, accountId, endpointId, true);
  await tx`update endpoints set deleted_at = now(), enabled = false, updated_at = now() where id = ${endpointId}`;
  await stopPending(tx, endpointId, "endpoint_deleted");
}

async function stopPending(tx: Tx, endpointId: string, error: "endpoint_disabled" | "endpoint_deleted"): Promise<void> {
  await tx`
    update deliveries set status = 'failed', error = ${error}, next_attempt_at = null, updated_at = now()
    where endpoint_id = ${endpointId} and status = 'pending'`;
}

/** Largest overlap a roll may ask for. */
export const MAX_ROLL_OVERLAP_SECONDS = 7 * 24 * 3600;

/**
 * Replaces the secret. The one being replaced keeps signing beside the new one for
 * `overlapSeconds` (0 ends it now), so receivers can switch without dropping deliveries.
 */
export async function rollSecret(tx: Tx, key: Buffer, accountId: string, endpointId: string, overlapSeconds: number): Promise<string> {
  if (!Number.isInteger(overlapSeconds) || overlapSeconds < 0 || overlapSeconds > MAX_ROLL_OVERLAP_SECONDS) {
    throw invalidArgument(`expire_previous_in_seconds must be a whole number from 0 to ${MAX_ROLL_OVERLAP_SECONDS}`, {
      field: "expire_previous_in_seconds",
    });
  }
  const secret = generateSecret();
  await findEndpoint(tx, accountId, endpointId, true);
  await tx`
    update endpoints set
      previous_secret = ${overlapSeconds > 0 ? tx`secret` : null},
      previous_secret_expires_at = ${overlapSeconds > 0 ? tx`now() + make_interval(secs => ${overlapSeconds})` : null},
      secret = ${encryptSecret(key, endpointId, secret)},
      updated_at = now()
    where id = ${endpointId}`;
  return secret;
}

/** The secrets that sign a delivery now: the current one, then the previous one while it lasts. */
export function signingSecrets(
  key: Buffer,
  row: { endpoint_id: string; secret: Uint8Array; previous_secret: Uint8Array | null; previous_active: boolean },
): string[] {
  const secrets = [decryptSecret(key, row.endpoint_id, row.secret)];
  if (row.previous_secret && row.previous_active) secrets.push(decryptSecret(key, row.endpoint_id, row.previous_secret));
  return secrets;
}

/**
 * Refuses a start whose `NOTIFICATION_SECRET_KEY` does not open the signing secrets already stored.
 * Such a process would still claim due deliveries, its neighbours' included, and fail every
 * attempt (error `internal`) until the retries ran out: one misconfigured replica would stop every
 * destination's deliveries. The newest destination's secret is the sample (deleted ones included:
 * their rows keep the secret).
 */
export async function checkSecretKey(sql: Sql, key: Buffer): Promise<void> {
  const [row] = await sql<{ id: string; secret: Uint8Array }[]>`select id, secret from endpoints order by id desc limit 1`;
  if (!row) return;
  try {
    decryptSecret(key, row.id, row.secret);
  } catch {
    throw new Error(
      "NOTIFICATION_SECRET_KEY does not open the webhook signing secrets stored in this database: every notification process must run with the key that sealed them (docs/configuration.md)",
    );
  }
}
