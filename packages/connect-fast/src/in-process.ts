// Calls between a caller and a service in the same process (`npm start`), in memory.
import { fromBinary, toBinary } from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  createContextValues,
  createRouterTransport,
  type ConnectRouter,
  type Interceptor,
  type Transport,
  type UnaryResponse,
} from "@connectrpc/connect";
import { errorFromJsonBytes, errorToJsonBytes } from "@connectrpc/connect/protocol-connect";
import { runCallerUnary } from "./caller.js";
import { unaryFastPathEnabled } from "./switch.js";
import { CallContext, invoke, parseRequest, unaryMethods, type UnaryFn } from "./unary-fast-path.js";

/**
 * A service running in this process, which its callers in the same process reach in memory:
 * each call goes through the service's own interceptors (tracing, request id, metrics, rate limit,
 * authentication) and handlers with the caller's headers, exactly as a call arriving on its port
 * does, but without a socket, HTTP/2 framing or the event-loop turns between two ends of one
 * process. Messages are still encoded and decoded (binary protobuf), so a caller can never share
 * or mutate the service's objects.
 */
export interface InProcessService {
  readonly name: string;
  /** A transport to the service; `interceptors` are the caller's own client interceptors (its tracing). */
  transport(interceptors?: Interceptor[]): Transport;
}

/** What `inProcessService` needs: the same routes, interceptors and body limit as the service's port. */
export interface InProcessOptions {
  name: string;
  routes: (router: ConnectRouter) => void;
  interceptors: Interceptor[];
  readMaxBytes: number;
  /** Unary calls skip Connect's router and client; unset, RPC_UNARY_FAST_PATH decides (`unaryFastPathEnabled`). */
  unaryFastPath?: boolean | undefined;
}

/**
 * The in-memory side of a service. Off (`unaryFastPath` false, or RPC_UNARY_FAST_PATH=false),
 * every call goes through Connect's own `createRouterTransport`: Connect's client, the service's
 * router with its interceptors and body limit, binary protobuf, no compression. On, unary calls to
 * the routes' methods go through `createInProcessTransport` instead, and the rest (streaming
 * calls) through that same router transport, made when first needed.
 */
export function inProcessService(options: InProcessOptions): InProcessService {
  const fastPath = options.unaryFastPath ?? unaryFastPathEnabled();
  const routerTransport = (interceptors: Interceptor[]) =>
    createRouterTransport(options.routes, {
      router: { interceptors: options.interceptors, readMaxBytes: options.readMaxBytes, connect: true, grpc: false, grpcWeb: false },
      transport: { baseUrl: `http://${options.name}.in-process`, interceptors },
    });
  return {
    name: options.name,
    transport: (interceptors = []) => {
      if (!fastPath) return routerTransport(interceptors);
      let fallback: Transport | undefined;
      return createInProcessTransport(options, () => (fallback ??= routerTransport(interceptors)), interceptors);
    },
  };
}

/**
 * Unary calls from a caller in this process to a service in it, without Connect's router and
 * universal client between them (which cost as much CPU per call as connect-node's server): the
 * caller's interceptors, then the request encoded and decoded (so neither side can share or change
 * the other's objects), the service's own interceptors and handler as on its port, and the answer
 * encoded and decoded back. A refusal reaches the caller as it would over the wire: the error's
 * JSON read back into a new `ConnectError`, with the response headers and trailers as its metadata.
 * The caller's deadline and signal end the call for the caller, as Connect's client does; the
 * handler goes on, as it would on its port. Streaming calls, and methods the routes do not have,
 * go to `fallback`.
 */
function createInProcessTransport(options: InProcessOptions, fallback: () => Transport, callerInterceptors: Interceptor[]): Transport {
  const methods = unaryMethods(options.routes);
  return {
    unary(method, signal, timeoutMs, header, input, contextValues) {
      const target = methods.get(`/${method.parent.typeName}/${method.name}`);
      if (!target) return fallback().unary(method, signal, timeoutMs, header, input, contextValues);
      const url = `http://${options.name}.in-process/${method.parent.typeName}/${method.name}`;
      const service = method.parent;
      const send: UnaryFn = async (req) => {
        const call = new CallContext(target, url, new Headers(req.header), createContextValues(), timeoutMs, undefined);
        try {
          const input = parseRequest(method.input, toBinary(method.input, req.message as never), options.readMaxBytes);
          const output = await invoke(target, call, input, options.interceptors);
          const message = fromBinary(method.output, toBinary(target.method.output, output));
          return { stream: false, service, method, header: call.responseHeader, trailer: call.responseTrailer, message } as UnaryResponse;
        } catch (e) {
          call.abort(e);
          const error = e instanceof ConnectError ? e : new ConnectError("internal error", Code.Internal, undefined, undefined, e);
          const metadata = new Headers(call.responseHeader);
          for (const [key, value] of call.responseTrailer) metadata.set(key, value);
          for (const [key, value] of error.metadata) metadata.set(key, value);
          throw errorFromJsonBytes(errorToJsonBytes(error, undefined), metadata, new ConnectError("internal error", Code.Internal));
        } finally {
          call.abort();
        }
      };
      return runCallerUnary(callerInterceptors, send, {
        method,
        url,
        header: new Headers(header),
        input,
        contextValues,
        signal,
        timeoutMs,
      }) as never;
    },
    stream: (...args) => fallback().stream(...args),
  };
}
