import { createConnectRouter, type ConnectRouter, type Interceptor, type Transport } from "@connectrpc/connect";
import { createUniversalHandlerClient } from "@connectrpc/connect/protocol";
import { createTransport } from "@connectrpc/connect/protocol-connect";
import { createHttp2Transport } from "./http2-transport.js";
import { createInProcessTransport } from "./unary-fast-path.js";

/**
 * A service running in this process, which its callers in the same process reach in memory:
 * each call goes through the service's own router and interceptors (tracing, request id, metrics,
 * rate limit, authentication) with the caller's headers, exactly as a call arriving on its port
 * does, but without a socket, HTTP/2 framing or the event-loop turns between two ends of one
 * process. Messages are still encoded and decoded (binary protobuf), so a caller can never share
 * or mutate the service's objects.
 */
export interface InProcessService {
  readonly name: string;
  /** A transport to the service; `interceptors` are the caller's own client interceptors (its tracing). */
  transport(interceptors?: Interceptor[]): Transport;
}

/**
 * Where a caller finds another service: its base URL (HTTP/2 with binary protobuf, whether the
 * service is another process or another host), or the service itself when both run in one process
 * (`npm start`). Which one is a matter of configuration: the code that calls is the same.
 */
export type ServiceTarget = string | InProcessService;

/** What `inProcessService` needs: the same routes, interceptors and body limit as the service's port. */
export interface InProcessOptions {
  name: string;
  routes: (router: ConnectRouter) => void;
  interceptors: Interceptor[];
  readMaxBytes: number;
  /** Unary calls skip Connect's router and universal client (unary-fast-path.ts). Default true. */
  unaryFastPath?: boolean;
}

/** Builds the in-memory side of a service once; every caller's transport shares its router. */
export function inProcessService(options: InProcessOptions): InProcessService {
  const router = createConnectRouter({
    interceptors: options.interceptors,
    readMaxBytes: options.readMaxBytes,
    connect: true,
    grpc: false,
    grpcWeb: false,
  });
  options.routes(router);
  const httpClient = createUniversalHandlerClient(router.handlers);
  return {
    name: options.name,
    transport: (interceptors = []) => {
      const connect = createTransport({
        httpClient,
        baseUrl: `http://${options.name}.in-process`,
        useBinaryFormat: true,
        interceptors,
        acceptCompression: [],
        sendCompression: null,
        compressMinBytes: Number.MAX_SAFE_INTEGER,
        // The service's router enforces its own limit on what it reads, as its port does.
        readMaxBytes: Number.MAX_SAFE_INTEGER,
        writeMaxBytes: Number.MAX_SAFE_INTEGER,
      });
      return options.unaryFastPath === false ? connect : createInProcessTransport(options, connect, interceptors);
    },
  };
}

/**
 * The most a caller reads of one answer from a service at a URL: far above any answer a service
 * gives (its largest, a batch call's, is a few hundred KB), so that only a broken or foreign peer
 * meets it, and is refused with resource_exhausted instead of being held in memory.
 */
const ANSWER_MAX_BYTES = 64 * 1024 * 1024;

/**
 * A transport to `target`: in memory for a service of this process, else HTTP/2 to its URL, one
 * connection kept alive (http2-transport.ts), with binary protobuf and no compression (between our
 * own services gzip only costs CPU on both ends: a batch call's answer of 100 groups is 0.25-0.3 ms
 * of gzip in the service, bench/README.md).
 */
export function rpcTransport(target: ServiceTarget, interceptors: Interceptor[] = []): Transport {
  if (typeof target !== "string") return target.transport(interceptors);
  return createHttp2Transport({ baseUrl: target, interceptors, pingIntervalMs: 30_000, readMaxBytes: ANSWER_MAX_BYTES });
}

/**
 * A readiness check that `target` is up: its /healthz answers, for a service elsewhere; always,
 * for one in this process (it is up when this process is, and its own checks are this process's).
 */
export function targetIsUp(target: ServiceTarget): () => Promise<boolean> {
  if (typeof target !== "string") return async () => true;
  return async () => (await fetch(new URL("/healthz", target), { signal: AbortSignal.timeout(1_500) })).ok;
}
