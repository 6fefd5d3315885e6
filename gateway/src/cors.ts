import type { IncomingMessage, ServerResponse } from "node:http";
import { ConfigError, envOptional } from "@ledger/common";
import { API_PREFIX } from "./server.js";

/** Request headers a browser page may send to the API (besides the CORS-safelisted ones). */
export const CORS_ALLOWED_HEADERS = [
  "Authorization",
  "Content-Type",
  "Idempotency-Key",
  "program_id",
  "X-Request-Id",
  "traceparent",
  "tracestate",
];
/** Response headers a browser page may read (besides the CORS-safelisted ones). */
export const CORS_EXPOSED_HEADERS = ["Idempotent-Replayed", "Retry-After", "X-Request-Id"];
/** How long a browser may keep a preflight's answer, in seconds. */
const PREFLIGHT_MAX_AGE_SECONDS = 600;

/**
 * GATEWAY_CORS_ORIGINS: comma-separated exact origins (`https://app.example.com`), or unset for no
 * CORS at all. Each must be an origin and nothing more: no `*`, no path, no trailing slash, since
 * the check is an exact string comparison with the browser's Origin header.
 */
export function readCorsOrigins(env: Record<string, string | undefined>): string[] {
  const raw = envOptional(env, "GATEWAY_CORS_ORIGINS");
  if (raw === undefined) return [];
  const origins = raw
    .split(",")
    .map((o) => o.trim())
    .filter((o) => o !== "");
  for (const origin of origins) {
    let parsed: URL | undefined;
    try {
      parsed = new URL(origin);
    } catch {
      parsed = undefined;
    }
    if (!parsed || !["http:", "https:"].includes(parsed.protocol) || parsed.origin !== origin) {
      throw new ConfigError(
        "GATEWAY_CORS_ORIGINS",
        `must list exact origins such as https://app.example.com (scheme, host and port only), got ${JSON.stringify(origin)}`,
      );
    }
  }
  return origins;
}

/**
 * CORS for the /v1 paths, or undefined when no origin is allowed. The returned function answers a
 * preflight (OPTIONS with Access-Control-Request-Method) from an allowed origin for a known path
 * itself and returns true; on any other /v1 request from an allowed origin it sets the headers
 * that let the page read the answer (errors included) and returns false. An origin not on the
 * list gets no CORS header, so its preflight falls through to the usual 405 and the browser
 * refuses the call. `methodsOf` gives a path's methods (path relative to /v1), undefined if unknown.
 */
export function createCors(
  origins: string[],
  methodsOf: (path: string) => string[] | undefined,
): ((req: IncomingMessage, res: ServerResponse) => boolean) | undefined {
  if (origins.length === 0) return undefined;
  const allowed = new Set(origins);
  return (req, res) => {
    const pathname = (req.url ?? "/").split("?")[0]!;
    if (!pathname.startsWith(API_PREFIX + "/")) return false;
    // The answer depends on Origin: caches must not hand one origin's answer to another.
    res.setHeader("vary", "Origin");
    const origin = req.headers.origin;
    if (origin === undefined || !allowed.has(origin)) return false;
    if (req.method === "OPTIONS" && req.headers["access-control-request-method"] !== undefined) {
      const methods = methodsOf(pathname.slice(API_PREFIX.length).replace(/\/+$/, ""));
      if (!methods) return false;
      res.writeHead(204, {
        "access-control-allow-origin": origin,
        "access-control-allow-methods": methods.join(", "),
        "access-control-allow-headers": CORS_ALLOWED_HEADERS.join(", "),
        "access-control-max-age": String(PREFLIGHT_MAX_AGE_SECONDS),
      });
      res.end();
      return true;
    }
    res.setHeader("access-control-allow-origin", origin);
    res.setHeader("access-control-expose-headers", CORS_EXPOSED_HEADERS.join(", "));
    return false;
  };
}
