import { createClient, type Client, type Interceptor, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import { HoldService } from "@ledger/proto/hold/v1/hold_pb.js";
import { LedgerService } from "@ledger/proto/ledger/v1/ledger_pb.js";
import { NotificationService } from "@ledger/proto/notification/v1/notification_pb.js";

export * as ledgerV1 from "@ledger/proto/ledger/v1/ledger_pb.js";
export * as holdV1 from "@ledger/proto/hold/v1/hold_pb.js";
export * as notificationV1 from "@ledger/proto/notification/v1/notification_pb.js";
/** The event envelope on JetStream and each event's data (`BalanceAlertEventData` for `balance.*`). */
export * as eventsV1 from "@ledger/proto/events/v1/events_pb.js";

/**
 * Every event type, as a webhook destination subscribes to them (`eventTypes` of
 * `NotificationService.CreateEndpoint`; docs/webhooks.md#how-events-become-deliveries).
 */
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

/** One event type. */
export type EventType = (typeof EVENT_TYPES)[number];

/** Where the services are and how to call them. */
export interface ClientOptions {
  ledgerUrl: string;
  holdUrl?: string;
  notificationUrl?: string;
  /** Sent as `authorization` on every call. */
  apiKey: string;
  /** `connect` (default; binary Connect over HTTP/2) or `grpc`. */
  protocol?: "connect" | "grpc";
}

/** The three services' clients. */
export interface LedgerClients {
  ledger: Client<typeof LedgerService>;
  hold?: Client<typeof HoldService>;
  notification?: Client<typeof NotificationService>;
}

/**
 * Typed clients for internal callers: one HTTP/2 connection per service, kept alive, with the
 * API key on every call. Writes take `{ headers: { "idempotency-key": ... } }` per call.
 */
export function createLedgerClients(options: ClientOptions): LedgerClients {
  const auth: Interceptor = (next) => (req) => {
    req.header.set("authorization", options.apiKey);
    return next(req);
  };
  const transport = (baseUrl: string): Transport =>
    options.protocol === "grpc"
      ? createGrpcTransport({ baseUrl, interceptors: [auth] })
      : createConnectTransport({ baseUrl, httpVersion: "2", useBinaryFormat: true, interceptors: [auth] });
  return {
    ledger: createClient(LedgerService, transport(options.ledgerUrl)),
    ...(options.holdUrl ? { hold: createClient(HoldService, transport(options.holdUrl)) } : {}),
    ...(options.notificationUrl ? { notification: createClient(NotificationService, transport(options.notificationUrl)) } : {}),
  };
}
