import { createClient, type CallOptions, type Client } from "@connectrpc/connect";
import {
  ACCOUNT_HEADER,
  cachedAuthenticator,
  continueTrace,
  ledgerAuthenticator,
  REQUEST_ID_HEADER,
  rpcTransport,
  traceClientInterceptor,
  type ServiceTarget,
  type Authenticator,
  type CallOrigin,
  type Tracing,
} from "@ledger/common";
import { LedgerService } from "@ledger/proto/ledger/v1/ledger_pb.js";
import { ReservationService } from "@ledger/proto/ledger/v1/reservation_pb.js";

/** The ledger as the hold service uses it: reservations, entity look-ups, key checks. */
export interface LedgerClients {
  reservations: Client<typeof ReservationService>;
  ledger: Client<typeof LedgerService>;
  authenticate: Authenticator;
  /** Call options that act for `accountId` with the installation's service token, continuing `origin`'s request id and trace. */
  asAccount(accountId: string, origin?: CallOrigin): CallOptions;
}

/**
 * Connects to the ledger: over HTTP/2 with binary protobuf at its URL, or in memory when it runs in
 * this process; with `tracing`, each call is a client span.
 */
export function connectLedger(ledger: ServiceTarget, serviceToken: string, tracing?: Tracing): LedgerClients {
  const transport = rpcTransport(ledger, tracing ? [traceClientInterceptor(tracing)] : []);
  return {
    reservations: createClient(ReservationService, transport),
    ledger: createClient(LedgerService, transport),
    authenticate: cachedAuthenticator(ledgerAuthenticator(ledger, serviceToken)),
    asAccount(accountId, origin) {
      const headers: Record<string, string> = { authorization: `Service ${serviceToken}`, [ACCOUNT_HEADER]: accountId };
      if (!origin) return { headers, timeoutMs: 10_000 };
      headers[REQUEST_ID_HEADER] = origin.requestId;
      return { headers, timeoutMs: 10_000, ...continueTrace(origin.trace, headers) };
    },
  };
}
