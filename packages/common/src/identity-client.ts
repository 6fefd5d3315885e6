import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import type { Authenticator } from "./request-context.js";
import { IdentityService } from "@ledger/proto/ledger/v1/identity_pb.js";

/**
 * Resolves API keys by asking the ledger (for every service but the ledger itself), which owns identity (DESIGN.md section 2). An unknown
 * key is null; the ledger being unreachable is an error, which callers see as 503, not 401.
 */
export function ledgerAuthenticator(ledgerUrl: string): Authenticator {
  const identity = createClient(
    IdentityService,
    createConnectTransport({ baseUrl: ledgerUrl, httpVersion: "2", useBinaryFormat: true, pingIntervalMs: 30_000 }),
  );
  return async (apiKey) => {
    try {
      const res = await identity.authenticate({ apiKey }, { timeoutMs: 5_000 });
      return { accountId: res.accountId, defaultProgramId: res.defaultProgramId };
    } catch (err) {
      if (err instanceof ConnectError && err.code === Code.Unauthenticated) return null;
      throw err;
    }
  };
}
