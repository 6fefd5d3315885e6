import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { rpcTransport, type ServiceTarget } from "./in-process.js";
import type { Authenticator } from "./auth.js";
import { IdentityService } from "@ledger/proto/ledger/v1/identity_pb.js";

/**
 * Resolves API keys by asking the ledger (for every service but the ledger itself), which owns identity. An unknown
 * key is null; the ledger being unreachable is an error, which callers see as 503, not 401.
 * With the installation's `serviceToken`, the look-ups are the service's own calls, which the
 * ledger's rate limit leaves alone. Without it (the gateway, which holds no token), each look-up
 * is sent with the key it looks up, so the ledger counts it in that key's budget: a flood of
 * made-up keys cannot use up a budget that every caller of this process shares.
 */
export function ledgerAuthenticator(ledger: ServiceTarget, serviceToken?: string): Authenticator {
  const identity = createClient(IdentityService, rpcTransport(ledger));
  const service = serviceToken ? `Service ${serviceToken}` : undefined;
  return async (apiKey) => {
    try {
      const headers = { authorization: service ?? apiKey };
      const res = await identity.authenticate({ apiKey }, { timeoutMs: 5_000, headers });
      return { accountId: res.accountId, defaultProgramId: res.defaultProgramId };
    } catch (err) {
      if (err instanceof ConnectError && err.code === Code.Unauthenticated) return null;
      throw err;
    }
  };
}
