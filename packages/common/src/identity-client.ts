import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { rpcTransport, type ServiceTarget } from "./in-process.js";
import type { Authenticator } from "./auth.js";
import { IdentityService } from "@ledger/proto/ledger/v1/identity_pb.js";

/**
 * Resolves API keys by asking the ledger (for every service but the ledger itself), which owns identity. An unknown
 * key is null; the ledger being unreachable is an error, which callers see as 503, not 401.
 * With the installation's `serviceToken`, the look-ups are the service's own calls, which the
 * ledger's rate limit leaves alone; without it, they share the budget of this process's address.
 */
export function ledgerAuthenticator(ledger: ServiceTarget, serviceToken?: string): Authenticator {
  const identity = createClient(IdentityService, rpcTransport(ledger));
  const headers: Record<string, string> = serviceToken ? { authorization: `Service ${serviceToken}` } : {};
  return async (apiKey) => {
    try {
      const res = await identity.authenticate({ apiKey }, { timeoutMs: 5_000, headers });
      return { accountId: res.accountId, defaultProgramId: res.defaultProgramId };
    } catch (err) {
      if (err instanceof ConnectError && err.code === Code.Unauthenticated) return null;
      throw err;
    }
  };
}
