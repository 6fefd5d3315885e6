// Who a call acts for: API keys and service calls checked by one interceptor, and the short cache
// in front of key look-ups (docs/operations.md#api-keys).
import { timingSafeEqual } from "node:crypto";
import { Code, ConnectError, createContextKey, type HandlerContext, type Interceptor } from "@connectrpc/connect";
import { DISCOVERY_METHODS } from "./discovery.js";
import { appError } from "./errors.js";

/** The account (API customer) a request acts for, resolved from its API key. */
export interface Principal {
  accountId: string;
  defaultProgramId: string;
  /** The id of the API key that authenticated the request; absent for a service acting for the account. */
  apiKeyId?: string;
}

/** Resolves an API key to its principal, or null when the key is unknown. */
export type Authenticator = (apiKey: string) => Promise<Principal | null>;

const principalKey = createContextKey<Principal | undefined>(undefined, { description: "principal" });

/**
 * The API key in an Authorization header, or undefined when there is none. This is the one place
 * a key is read, for authentication and rate limits alike, so every spelling of one key is the
 * same key: an optional `Bearer ` in any case, and whitespace around it (Unicode whitespace too,
 * such as the no-break space a latin1 0xa0 byte becomes). What is left must look like a key,
 * printable ASCII without spaces, or it is no key at all.
 */
export function apiKeyFromAuthorization(value: string | null): string | undefined {
  if (!value) return undefined;
  const key = value.trim().replace(/^bearer(\s+|$)/i, "");
  return /^[\x21-\x7e]{1,256}$/.test(key) ? key : undefined;
}

/** Header naming the account a service acts for, next to `authorization: Service <token>`. */
export const ACCOUNT_HEADER = "x-account-id";

/** Whether an Authorization header is `Service <token>` with this installation's token (compared in constant time). */
export function isServiceCall(authorization: string | null, token: string): boolean {
  if (!authorization?.startsWith("Service ")) return false;
  const given = Buffer.from(authorization.slice("Service ".length));
  const expected = Buffer.from(token);
  return given.length === expected.length && timingSafeEqual(given, expected);
}

/**
 * The principal of the API key in an Authorization header, or a 401 `unauthenticated` when the
 * header holds no key or an unknown one: the one check of a key, for RPC calls (`authInterceptor`)
 * and for the REST gateway, which makes it before it reads a request's body.
 */
export async function principalOfKey(authorization: string | null | undefined, authenticate: Authenticator): Promise<Principal> {
  const apiKey = apiKeyFromAuthorization(authorization ?? null);
  if (!apiKey) throw appError(Code.Unauthenticated, "unauthenticated", "missing or malformed Authorization header: send your API key");
  const principal = await authenticate(apiKey);
  if (!principal) throw invalidKey();
  return principal;
}

function invalidKey(): ConnectError {
  return appError(Code.Unauthenticated, "unauthenticated", "the API key is not valid");
}

/** Options of `authInterceptor`. */
export interface AuthOptions {
  authenticate: Authenticator;
  /**
   * Full method names (`ledger.v1.IdentityService/Authenticate`) callable without a key, besides
   * gRPC health and reflection, which every port serves open (discovery.ts).
   */
  publicMethods?: string[];
  /**
   * Full method names only another service of this installation may call (the ledger's
   * reservations under holds): an API key alone answers PermissionDenied.
   */
  internalMethods?: string[];
  /** Lets another service of this installation act for an account (hold expiry, recovery). */
  service?: { token: string; resolveAccount: (accountId: string) => Promise<Principal | null> };
}

/**
 * Checks the `authorization` header of every call except public methods and stores the principal
 * for the handler: an API key, or `Service <token>` with the account in `x-account-id`.
 */
export function authInterceptor(options: AuthOptions): Interceptor {
  const open = new Set([...DISCOVERY_METHODS, ...(options.publicMethods ?? [])]);
  const internal = new Set(options.internalMethods ?? []);
  return (next) => async (req) => {
    if (open.has(`${req.service.typeName}/${req.method.name}`)) return next(req);
    const header = req.header.get("authorization");
    let principal: Principal | null = null;
    let asService = false;
    if (options.service && header?.startsWith("Service ")) {
      const accountId = req.header.get(ACCOUNT_HEADER);
      if (isServiceCall(header, options.service.token) && accountId) {
        principal = await options.service.resolveAccount(accountId);
        asService = true;
      }
    } else {
      principal = await principalOfKey(header, options.authenticate);
    }
    if (!principal) throw invalidKey();
    if (!asService && internal.has(`${req.service.typeName}/${req.method.name}`)) {
      throw appError(
        Code.PermissionDenied,
        "permission_denied",
        "this method is internal to the installation's services; an API key cannot call it",
      );
    }
    req.contextValues.set(principalKey, principal);
    return next(req);
  };
}

/** The principal of an authenticated call; a handler reached without one is a wiring bug. */
export function principalOf(ctx: HandlerContext): Principal {
  const principal = ctx.values.get(principalKey);
  if (!principal) throw new ConnectError("no principal on an authenticated method", Code.Internal);
  return principal;
}

/**
 * How long a process trusts a key look-up (positive or negative). A revoked key must answer 401
 * everywhere within 5 seconds (docs/operations.md#api-keys). The ledger's REST and RPC calls see its
 * own cache; the hold and notification services cache the answer of the ledger's
 * IdentityService, which reads the database uncached. So one TTL is the whole delay: a
 * revocation is seen at most AUTH_CACHE_TTL_MS (plus one look-up) after it commits.
 *
 * A short TTL rather than a revocation broadcast: it needs nothing to be delivered (a revocation
 * made while NATS is down, by the CLI, which has no NATS connection, or straight in SQL is still
 * seen in time), and its cost is one indexed look-up per key per process every 2 seconds, which
 * a busy key does not notice and concurrent misses share.
 */
export const AUTH_CACHE_TTL_MS = 2_000;

/**
 * Wraps an authenticator with a short-lived cache, so a hot client costs one look-up per
 * `ttlMs`, not one per request; concurrent misses of one key share a single look-up. A revoked
 * key keeps working for at most `ttlMs` after the look-up that last found it began.
 */
export function cachedAuthenticator(inner: Authenticator, ttlMs = AUTH_CACHE_TTL_MS, maxEntries = 10_000): Authenticator {
  const cache = new Map<string, { principal: Principal | null; expires: number }>();
  const inFlight = new Map<string, Promise<Principal | null>>();
  const lookUp = async (apiKey: string) => {
    // Timed from before the look-up: the answer may be that old by the time it arrives.
    const started = Date.now();
    try {
      const principal = await inner(apiKey);
      if (cache.size >= maxEntries) cache.delete(cache.keys().next().value!);
      cache.set(apiKey, { principal, expires: started + ttlMs });
      return principal;
    } finally {
      inFlight.delete(apiKey);
    }
  };
  return async (apiKey) => {
    const hit = cache.get(apiKey);
    if (hit && hit.expires > Date.now()) return hit.principal;
    let pending = inFlight.get(apiKey);
    if (!pending) {
      pending = lookUp(apiKey);
      inFlight.set(apiKey, pending);
    }
    return pending;
  };
}
