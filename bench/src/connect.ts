// The RPC load: Connect's own client (connect-node), binary protobuf over one HTTP/2 connection
// per service. h2load cannot send it: it posts one body file for every request, so every transfer
// would move money between the same two entities, and these workloads draw theirs at random.
import { ConnectError, createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { errorCodeOf } from "@ledger/common";
import { HoldService } from "@ledger/proto/hold/v1/hold_pb.js";
import { LedgerService } from "@ledger/proto/ledger/v1/ledger_pb.js";

/** No single call may outlive this: a stuck call ends as an error instead of hanging the run. */
export const REQUEST_TIMEOUT_MS = 30_000;

/** A failure the workloads count under a code of their own (a refused batch item). */
export class CallError extends Error {
  constructor(readonly code: string) {
    super(code);
  }
}

/** Connect clients of the ledger and the hold service acting for one API key. */
export interface Rpc {
  ledger: Client<typeof LedgerService>;
  hold: Client<typeof HoldService>;
  close(): void;
}

export function rpcClients(ledgerUrl: string, holdUrl: string, apiKey: string): Rpc {
  const auth: Interceptor = (next) => (req) => {
    req.header.set("authorization", apiKey);
    return next(req);
  };
  const sessions = [new Http2SessionManager(ledgerUrl), new Http2SessionManager(holdUrl)] as const;
  const transport = (baseUrl: string, sessionManager: Http2SessionManager) =>
    createConnectTransport({
      baseUrl,
      httpVersion: "2",
      useBinaryFormat: true,
      sessionManager,
      interceptors: [auth],
      defaultTimeoutMs: REQUEST_TIMEOUT_MS,
    });
  return {
    ledger: createClient(LedgerService, transport(ledgerUrl, sessions[0])),
    hold: createClient(HoldService, transport(holdUrl, sessions[1])),
    close: () => {
      for (const session of sessions) session.abort();
    },
  };
}

/** The code a failure is counted under: the domain code (`insufficient_funds`...) when there is one. */
export function errorCode(err: unknown): string {
  if (err instanceof CallError) return err.code;
  if (err instanceof ConnectError) return errorCodeOf(err).code;
  return err instanceof Error ? err.name : "exception";
}
