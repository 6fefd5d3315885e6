import type { ServiceImpl } from "@connectrpc/connect";
import { apiKeyFromAuthorization, appError, type Authenticator } from "@ledger/common";
import type { IdentityService } from "@ledger/proto/ledger/v1/identity_pb.js";
import { Code } from "@connectrpc/connect";

/** Lets other services resolve an API key (they cache the answer briefly: AUTH_CACHE_TTL_MS). */
export function createIdentityService(authenticate: Authenticator): ServiceImpl<typeof IdentityService> {
  return {
    async authenticate(req) {
      const key = apiKeyFromAuthorization(req.apiKey);
      const principal = key ? await authenticate(key) : null;
      if (!principal) throw appError(Code.Unauthenticated, "unauthenticated", "the API key is not valid");
      return { accountId: principal.accountId, defaultProgramId: principal.defaultProgramId };
    },
  };
}
