import { randomUUID, timingSafeEqual } from "node:crypto";
import { Code, ConnectError, createContextKey, type HandlerContext, type Interceptor } from "@connectrpc/connect";
import type { Logger } from "pino";
import { sqlState } from "./db.js";
import { appError } from "./errors.js";
import { traceOf, type TraceLink } from "./tracing.js";

/** The account (API customer) a request acts for, resolved from its API key. */
export interface Principal {
  accountId: string;
  defaultProgramId: string;
}

/** Resolves an API key to its principal, or null when the key is unknown. */
export type Authenticator = (apiKey: string) => Promise<Principal | null>;

const principalKey = createContextKey<Principal | undefined>(undefined, { description: "principal" });
const requestIdKey = createContextKey<string>("", { description: "request id" });

/** Header that carries the request id from the gateway through every RPC and into events. */
export const REQUEST_ID_HEADER = "x-request-id";

/** Strips an optional `Bearer ` prefix: DESIGN.md accepts the key with or without it. */
export function apiKeyFromAuthorization(value: string | null): string | undefined {
  if (!value) return undefined;
  const trimmed = value.trim();
  const key = /^bearer\s+/i.test(trimmed) ? trimmed.replace(/^bearer\s+/i, "") : trimmed;
  return key === "" ? undefined : key;
}

/** Header naming the account a service acts for, next to `authorization: Service <token>`. */
export const ACCOUNT_HEADER = "x-account-id";

/** Options of `authInterceptor`. */
export interface AuthOptions {
  authenticate: Authenticator;
  /** Full method names (`ledger.v1.IdentityService/Authenticate`) callable without a key. */
  publicMethods?: string[];
  /** Lets another service of this installation act for an account (hold expiry, recovery). */
  service?: { token: string; resolveAccount: (accountId: string) => Promise<Principal | null> };
}

/**
 * Checks the `authorization` header of every call except public methods and stores the principal
 * for the handler: an API key, or `Service <token>` with the account in `x-account-id`.
 */
export function authInterceptor(options: AuthOptions): Interceptor {
  const open = new Set(options.publicMethods ?? []);
  const serviceToken = options.service ? Buffer.from(options.service.token) : undefined;
  return (next) => async (req) => {
    if (open.has(`${req.service.typeName}/${req.method.name}`)) return next(req);
    const header = req.header.get("authorization");
    let principal: Principal | null = null;
    if (serviceToken && options.service && header?.startsWith("Service ")) {
      const given = Buffer.from(header.slice("Service ".length));
      const accountId = req.header.get(ACCOUNT_HEADER);
      if (given.length === serviceToken.length && timingSafeEqual(given, serviceToken) && accountId) {
        principal = await options.service.resolveAccount(accountId);
      }
    } else {
      const apiKey = apiKeyFromAuthorization(header);
      if (!apiKey) {
        throw appError(Code.Unauthenticated, "unauthenticated", "missing Authorization header: send your API key");
      }
      principal = await options.authenticate(apiKey);
    }
    if (!principal) throw appError(Code.Unauthenticated, "unauthenticated", "the API key is not valid");
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
 * Gives every call a request id (the caller's `x-request-id`, else a new one), echoes it back,
 * and logs calls that failed on the server's side. Client mistakes are logged at debug level.
 */
export function requestIdInterceptor(log: Logger): Interceptor {
  return (next) => async (req) => {
    const incoming = req.header.get(REQUEST_ID_HEADER);
    const requestId = incoming && /^[\w.:-]{1,128}$/.test(incoming) ? incoming : randomUUID();
    req.contextValues.set(requestIdKey, requestId);
    const started = performance.now();
    try {
      const res = await next(req);
      res.header.set(REQUEST_ID_HEADER, requestId);
      log.debug({ request_id: requestId, method: req.method.name, ms: Math.round(performance.now() - started) }, "rpc ok");
      return res;
    } catch (err) {
      const error = clientSafeError(err);
      error.metadata.set(REQUEST_ID_HEADER, requestId);
      const serverSide = [Code.Internal, Code.Unknown, Code.DataLoss, Code.Unavailable].includes(error.code);
      const fields = { request_id: requestId, method: req.method.name, code: Code[error.code], ms: Math.round(performance.now() - started) };
      if (serverSide) log.error({ ...fields, err: error.cause ?? error }, "rpc failed");
      else log.debug({ ...fields, message: error.rawMessage }, "rpc refused");
      throw error;
    }
  };
}

/** The request id of the current call. */
export function requestIdOf(ctx: HandlerContext): string {
  return ctx.values.get(requestIdKey);
}

/**
 * Wraps an authenticator with a short-lived cache, so a hot client costs one look-up per
 * `ttlMs`, not one per request. A revoked key keeps working for at most `ttlMs`.
 */
export function cachedAuthenticator(inner: Authenticator, ttlMs = 30_000, maxEntries = 10_000): Authenticator {
  const cache = new Map<string, { principal: Principal | null; expires: number }>();
  return async (apiKey) => {
    const now = Date.now();
    const hit = cache.get(apiKey);
    if (hit && hit.expires > now) return hit.principal;
    const principal = await inner(apiKey);
    if (cache.size >= maxEntries) cache.delete(cache.keys().next().value!);
    // Unknown keys are cached briefly too, so a client hammering with a bad key costs little.
    cache.set(apiKey, { principal, expires: now + (principal ? ttlMs : Math.min(ttlMs, 5_000)) });
    return principal;
  };
}

/**
 * What a client may see of an error. Deliberate errors pass through; anything else (a database
 * error, a bug) becomes a bare `internal` whose cause stays in the log, so no SQL text or stack
 * ever crosses the wire.
 */
export function clientSafeError(err: unknown): ConnectError {
  if (err instanceof ConnectError) return err;
  const state = sqlState(err);
  if (state === "40001" || state === "40P01") {
    return appError(Code.Aborted, "conflict", "the request conflicted with a concurrent one; retry it", undefined, err);
  }
  if (state === "23514") {
    // A balance check constraint caught what the code should have refused first.
    return appError(Code.FailedPrecondition, "insufficient_funds", "the entity does not have enough available funds", undefined, err);
  }
  const netCode = (err as { code?: unknown } | null)?.code;
  if (state?.startsWith("08") || state === "57P01" || netCode === "ECONNREFUSED" || netCode === "CONNECT_TIMEOUT" || netCode === "CONNECTION_CLOSED") {
    return appError(Code.Unavailable, "unavailable", "a dependency of the service is unavailable; retry shortly", undefined, err);
  }
  return new ConnectError("internal error", Code.Internal, undefined, undefined, err);
}

/** What work caused by a call carries of it: the request id for logs and the trace for spans. */
export interface CallOrigin {
  requestId: string;
  trace: TraceLink;
}

/** The origin of the current call, for the work and events it causes. */
export function originOf(ctx: HandlerContext): CallOrigin {
  return { requestId: requestIdOf(ctx), trace: traceOf(ctx) };
}
