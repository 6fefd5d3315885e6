import * as http from "node:http";
import * as https from "node:https";
import { createSecureContext, rootCertificates, type SecureContext } from "node:tls";
import { resolveTarget, type ResolvedTarget } from "./address-policy.js";
import { ConnectionGate, Ticket } from "./connection-gate.js";

/** What one attempt produced. `error` is empty when a response arrived, whatever its status. */
export interface AttemptResult {
  status: number;
  /** The first 1 KiB of the response body. */
  bodyExcerpt: string;
  durationMs: number;
  error: string;
  /** Seconds from a `Retry-After` header, when one was sent. */
  retryAfterSeconds?: number;
}

/** How to send. */
export interface SendOptions {
  timeoutMs: number;
  allowPrivateNetworks: boolean;
  /** PEM certificates to trust beside Node's roots. */
  extraCa?: string;
  userAgent: string;
}

const EXCERPT_BYTES = 1024;
// Past this much the body is not read: a receiver streaming megabytes must not tie up a worker.
const READ_LIMIT_BYTES = 64 * 1024;

/** Classifies a socket or TLS error into the short codes docs/webhooks.md#retries-and-delivery-states lists. */
export function errorCode(err: unknown): string {
  const code = String((err as { code?: unknown } | null)?.code ?? "");
  if (code === "blocked_address" || code === "dns" || code === "timeout") return code;
  if (code === "ECONNREFUSED") return "connection_refused";
  if (code === "ECONNRESET" || code === "EPIPE") return "connection_reset";
  if (code === "EHOSTUNREACH" || code === "ENETUNREACH") return "unreachable";
  if (code === "ENOTFOUND" || code === "EAI_AGAIN") return "dns";
  if (/CERT|SSL|TLS|SELF_SIGNED|UNABLE_TO_VERIFY|HOSTNAME/i.test(code) || /ssl|tls|certificate/i.test(String((err as Error)?.message)))
    return "tls";
  return "network";
}

function parseRetryAfter(value: string | undefined): number | undefined {
  if (!value) return undefined;
  if (/^\d+$/.test(value.trim())) return Number(value.trim());
  const at = Date.parse(value);
  return Number.isNaN(at) ? undefined : Math.max(0, Math.round((at - Date.now()) / 1000));
}

// Keep-alive pools, one per destination URL and checked address (and trusted CAs): a connection
// in a pool always goes to the address that passed the check when it was opened, so reuse cannot
// bypass the SSRF policy, and a busy destination no longer pays a TLS handshake per attempt. Two
// destinations on one host keep pools of their own, so a slow one cannot hold the connections a
// fast one would reuse, and each pool's gate sees one receiver's answer times.
interface Pool {
  agent: http.Agent;
  gate: ConnectionGate;
}
const pools = new Map<string, Pool>();
const MAX_POOLS = 1_000;

function poolFor(isHttps: boolean, target: ResolvedTarget, url: URL, extraCa: string | undefined): Pool {
  const key = `${target.address}|${url.href}|${extraCa ? extraCa.length : 0}`;
  let pool = pools.get(key);
  if (pool) {
    // Most recently used last, so the oldest is evicted first.
    pools.delete(key);
    pools.set(key, pool);
    return pool;
  }
  // Idle sockets are kept up to the most a destination may have in flight (max_concurrency, at
  // most 256): fewer closed a socket after most attempts and opened a new one, TLS handshake and
  // all, for the next (docs/decisions/webhook-connection-policy.md). How many are opened is the
  // gate's decision.
  const settings = { keepAlive: true, keepAliveMsecs: 10_000, maxFreeSockets: 256, scheduling: "lifo" as const };
  pool = { agent: isHttps ? new https.Agent(settings) : new http.Agent(settings), gate: new ConnectionGate() };
  pools.set(key, pool);
  if (pools.size > MAX_POOLS) {
    const [oldestKey, oldest] = pools.entries().next().value!;
    pools.delete(oldestKey);
    oldest.agent.destroy();
  }
  return pool;
}

// One TLS context per set of extra CAs: building one parses every root certificate, which cost
// more than the request itself when each new connection made its own. Without extra CAs the
// context is the default one (Node's roots and NODE_EXTRA_CA_CERTS), also built once: left to
// itself, every new connection built its own (1.5% of the busy time of a drain's profile).
const secureContexts = new Map<string, SecureContext>();
function secureContextWith(extraCa: string | undefined): SecureContext {
  const key = extraCa ?? "";
  let context = secureContexts.get(key);
  if (!context) {
    context = extraCa ? createSecureContext({ ca: [...rootCertificates, extraCa] }) : createSecureContext();
    secureContexts.set(key, context);
  }
  return context;
}

/**
 * POSTs `body` to `url` once. The host is resolved and checked now, and the connection is made to
 * that checked address (a custom `lookup`), while TLS still verifies the certificate against the
 * URL's host name. Redirects are not followed: a 3xx is a failed attempt like any other non-2xx.
 */
export async function sendOnce(url: URL, body: string, headers: Record<string, string>, options: SendOptions): Promise<AttemptResult> {
  const started = performance.now();
  const elapsed = () => Math.round(performance.now() - started);
  let target: ResolvedTarget;
  try {
    target = await resolveTarget(url.hostname, options.allowPrivateNetworks);
  } catch (err) {
    return { status: 0, bodyExcerpt: "", durationMs: elapsed(), error: errorCode(err) };
  }
  const isHttps = url.protocol === "https:";
  const transport = isHttps ? https : http;
  const pool = poolFor(isHttps, target, url, options.extraCa);
  // Waits (at most a second, usually not at all) while every connection is busy and the gate
  // judges another one useless; the wait is part of the attempt's duration.
  const entered = pool.gate.enter();
  const ticket = entered instanceof Ticket ? entered : await entered;
  let answered = false;
  try {
    const result = await new Promise<AttemptResult>((resolve) => {
      let settled = false;
      const finish = (result: AttemptResult) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        resolve(result);
      };
      const req = transport.request(
        {
          protocol: url.protocol,
          hostname: url.hostname.replace(/^\[|\]$/g, ""),
          port: url.port || (isHttps ? 443 : 80),
          path: `${url.pathname}${url.search}`,
          method: "POST",
          headers: Object.assign({}, headers, { "content-length": String(Buffer.byteLength(body)) }),
          agent: pool.agent,
          // Pin the connection to the address that passed the check.
          lookup: (_host: string, opts: { all?: boolean }, cb: (...args: unknown[]) => void) => {
            if (opts?.all) cb(null, [{ address: target.address, family: target.family }]);
            else cb(null, target.address, target.family);
          },
          ...(isHttps ? { secureContext: secureContextWith(options.extraCa) } : {}),
        } as https.RequestOptions,
        (res) => {
          const chunks: Buffer[] = [];
          let size = 0;
          const done = () =>
            finish({
              status: res.statusCode ?? 0,
              bodyExcerpt: Buffer.concat(chunks).subarray(0, EXCERPT_BYTES).toString("utf8"),
              durationMs: elapsed(),
              error: "",
              ...(parseRetryAfter(res.headers["retry-after"]) !== undefined
                ? { retryAfterSeconds: parseRetryAfter(res.headers["retry-after"])! }
                : {}),
            });
          res.on("data", (chunk: Buffer) => {
            if (size < EXCERPT_BYTES) chunks.push(chunk);
            size += chunk.length;
            if (size > READ_LIMIT_BYTES) {
              done();
              res.destroy();
            }
          });
          res.on("end", done);
          res.on("error", () => done());
        },
      );
      const timer = setTimeout(() => {
        finish({ status: 0, bodyExcerpt: "", durationMs: elapsed(), error: "timeout" });
        req.destroy();
      }, options.timeoutMs);
      req.on("socket", (socket) => pool.gate.socket(ticket, socket));
      req.on("error", (err) => finish({ status: 0, bodyExcerpt: "", durationMs: elapsed(), error: errorCode(err) }));
      req.end(body);
    });
    answered = result.error === "";
    return result;
  } finally {
    // Also when the request could not even be made, so the gate never counts it busy for ever.
    pool.gate.leave(ticket, answered);
  }
}
