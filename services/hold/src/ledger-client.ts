import { createClient, type CallOptions, type Client } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { ACCOUNT_HEADER, cachedAuthenticator, ledgerAuthenticator, REQUEST_ID_HEADER, type Authenticator } from "@ledger/common";
import { LedgerService } from "@ledger/proto/ledger/v1/ledger_pb.js";
import { ReservationService } from "@ledger/proto/ledger/v1/reservation_pb.js";

/** The ledger as the hold service uses it: reservations, entity look-ups, key checks. */
export interface LedgerClients {
  reservations: Client<typeof ReservationService>;
  ledger: Client<typeof LedgerService>;
  authenticate: Authenticator;
  /** Call options that act for `accountId` with the installation's service token. */
  asAccount(accountId: string, requestId?: string): CallOptions;
}

/** Connects to the ledger over HTTP/2 with binary protobuf. */
export function connectLedger(ledgerUrl: string, serviceToken: string): LedgerClients {
  const transport = createConnectTransport({ baseUrl: ledgerUrl, httpVersion: "2", useBinaryFormat: true, pingIntervalMs: 30_000 });
  return {
    reservations: createClient(ReservationService, transport),
    ledger: createClient(LedgerService, transport),
    authenticate: cachedAuthenticator(ledgerAuthenticator(ledgerUrl)),
    asAccount(accountId, requestId) {
      return {
        headers: {
          authorization: `Service ${serviceToken}`,
          [ACCOUNT_HEADER]: accountId,
          ...(requestId ? { [REQUEST_ID_HEADER]: requestId } : {}),
        },
        timeoutMs: 10_000,
      };
    },
  };
}
