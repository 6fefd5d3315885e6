import type { Interceptor, Transport } from "@connectrpc/connect";
import { createHttp2Transport, type InProcessService } from "@ledger/connect-fast";

export type { InProcessService } from "@ledger/connect-fast";

/**
 * Where a caller finds another service: its base URL (HTTP/2 with binary protobuf, whether the
 * service is another process or another host), or the service itself when both run in one process
 * (`npm start`; `RunningServer.inProcess`). Which one is a matter of configuration: the code that
 * calls is the same.
 */
export type ServiceTarget = string | InProcessService;

/**
 * The most a caller reads of one answer from a service at a URL: far above any answer a service
 * gives (its largest, a batch call's, is a few hundred KB), so that only a broken or foreign peer
 * meets it, and is refused with resource_exhausted instead of being held in memory.
 */
const ANSWER_MAX_BYTES = 64 * 1024 * 1024;

/**
 * A transport to `target`: in memory for a service of this process, else HTTP/2 to its URL, one
 * connection kept alive, with binary protobuf and no compression (between our own services gzip
 * only costs CPU on both ends: docs/decisions/no-gzip-between-services.md). Unary calls go the lean way of @ledger/connect-fast unless
 * RPC_UNARY_FAST_PATH=false, which leaves every call to Connect's own transports.
 */
export function rpcTransport(target: ServiceTarget, interceptors: Interceptor[] = []): Transport {
  if (typeof target !== "string") return target.transport(interceptors);
  return createHttp2Transport({
    baseUrl: target,
    interceptors,
    pingIntervalMs: 30_000,
    readMaxBytes: ANSWER_MAX_BYTES,
  });
}

/**
 * A readiness check that `target` is up: its /healthz answers, for a service elsewhere; always,
 * for one in this process (it is up when this process is, and its own checks are this process's).
 */
export function targetIsUp(target: ServiceTarget): () => Promise<boolean> {
  if (typeof target !== "string") return async () => true;
  return async () => (await fetch(new URL("/healthz", target), { signal: AbortSignal.timeout(1_500) })).ok;
}
