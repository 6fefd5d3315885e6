// Test-only: a service's port as @ledger/common's `listen` builds one, reduced to what this
// package's tests need: HTTP/2 streams offered to the unary fast path first, the rest to
// connect-node through node's compatibility request and response, and a connection closed once it
// has had no open stream for `idleTimeoutMs`.
import * as http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { createContextValues, type ConnectRouter, type ContextValues, type Interceptor } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { createUnaryFastPath } from "./unary-fast-path.js";

export interface TestPortOptions {
  routes: (router: ConnectRouter) => void;
  interceptors: Interceptor[];
  readMaxBytes: number;
  /** Whether the fast path is on; unset, RPC_UNARY_FAST_PATH decides. */
  unaryFastPath?: boolean | undefined;
  contextValues?: () => ContextValues;
  idleTimeoutMs?: number;
}

export interface TestPort {
  url: string;
  port: number;
  /** The requests the fast path took, so far. */
  fastCalls: number;
  close(): Promise<void>;
}

export async function servePort(options: TestPortOptions): Promise<TestPort> {
  const stopping = new AbortController();
  const fast = createUnaryFastPath({
    routes: options.routes,
    interceptors: options.interceptors,
    readMaxBytes: options.readMaxBytes,
    contextValues: () => options.contextValues?.() ?? createContextValues(),
    shutdownSignal: stopping.signal,
    unaryFastPath: options.unaryFastPath,
  });
  const connect = connectNodeAdapter({
    routes: options.routes,
    interceptors: options.interceptors,
    readMaxBytes: options.readMaxBytes,
    ...(options.contextValues ? { contextValues: options.contextValues } : {}),
  });
  const server = http2.createServer();
  const sessions = new Set<http2.ServerHttp2Session>();
  const port: TestPort = { url: "", port: 0, fastCalls: 0, close: async () => {} };
  server.on("stream", (stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders, _flags: number, rawHeaders: string[]) => {
    const served = fast?.(stream, headers);
    if (served) {
      port.fastCalls++;
      return;
    }
    connect(new http2.Http2ServerRequest(stream, headers, {}, rawHeaders), new http2.Http2ServerResponse(stream));
  });
  server.on("session", (session: http2.ServerHttp2Session) => {
    sessions.add(session);
    session.once("close", () => sessions.delete(session));
    if (options.idleTimeoutMs === undefined) return;
    const idleTimeoutMs = options.idleTimeoutMs;
    let open = 0;
    let idle = setTimeout(() => session.close(), idleTimeoutMs);
    session.on("stream", (stream: http2.ServerHttp2Stream) => {
      open++;
      clearTimeout(idle);
      stream.once("close", () => {
        if (--open === 0 && !session.closed) idle = setTimeout(() => session.close(), idleTimeoutMs);
      });
    });
    session.once("close", () => clearTimeout(idle));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  port.port = (server.address() as AddressInfo).port;
  port.url = `http://127.0.0.1:${port.port}`;
  port.close = async () => {
    stopping.abort();
    for (const session of sessions) session.destroy();
    await new Promise((resolve) => server.close(resolve));
  };
  return port;
}
