// The two ways in: REST/JSON through the gateway over keep-alive HTTP/1.1, and Connect RPC straight
// to the services over one HTTP/2 connection with binary protobuf.
import { Agent, request } from "node:http";
import http2, { type ClientHttp2Session } from "node:http2";
import { create, type DescMessage, type DescMethod, type DescService, type MessageInitShape, type MessageShape } from "@bufbuild/protobuf";
import { ConnectError, createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { decodeBinary, encodeBinary, errorCodeOf } from "@ledger/common";
import { connectErrorFromJson } from "@ledger/connect-fast";
import { HoldService } from "@ledger/proto/hold/v1/hold_pb.js";
import { LedgerService } from "@ledger/proto/ledger/v1/ledger_pb.js";
import { H2CallError, H2Client, type H2Answer, requestHeaderBlock } from "./h2-wire.js";
import { H1CallError, H1Client } from "./http1-wire.js";

/** No single request may outlive this: a stuck call ends as an error instead of hanging the run. */
export const REQUEST_TIMEOUT_MS = 30_000;

/** A failed call, with the code the workloads count it under. */
export class CallError extends Error {
  constructor(readonly code: string) {
    super(code);
  }
}

/** A JSON client of the gateway bound to one API key. */
export interface Rest {
  post<T = Record<string, unknown>>(path: string, body: unknown): Promise<T>;
  /** The same with another method, for example PUT. */
  send<T = Record<string, unknown>>(method: string, path: string, body: unknown): Promise<T>;
  close(): void;
}

/**
 * Keep-alive HTTP/1.1 with as many sockets as the concurrency, so every worker keeps its own
 * connection and no request pays for a TCP handshake or waits for a free socket. The requests go
 * through `H1Client` (`http1-wire.ts`); `BENCH_REST_CLIENT=node` sends the same requests through
 * node:http's agent instead, for comparison (bench/README.md).
 */
export function restClient(
  restUrl: string,
  apiKey: string,
  maxSockets: number,
  wire: "by-hand" | "node" = process.env["BENCH_REST_CLIENT"] === "node" ? "node" : "by-hand",
): Rest {
  const url = new URL(restUrl);
  const http = wire === "node" ? nodeHttpSend(url, apiKey, maxSockets) : byHandHttpSend(url, apiKey, maxSockets);
  const send = async <T>(method: string, path: string, body: unknown): Promise<T> => {
    const answer = await http.call(method, url.pathname + path, Buffer.from(JSON.stringify(body)));
    let parsed: { error?: { code?: string } } | undefined;
    try {
      parsed = JSON.parse(answer.body.toString("utf8")) as { error?: { code?: string } };
    } catch {
      parsed = undefined;
    }
    if (answer.status < 300 && parsed) return parsed as T;
    throw new CallError(parsed?.error?.code ?? `http_${answer.status}`);
  };
  return {
    post: (path, body) => send("POST", path, body),
    send,
    close: () => http.close(),
  };
}

/** A JSON request's status and body, whichever client sent it. */
interface HttpSend {
  call(method: string, path: string, body: Buffer): Promise<{ status: number; body: Buffer }>;
  close(): void;
}

function byHandHttpSend(url: URL, apiKey: string, maxSockets: number): HttpSend {
  const client = new H1Client(
    url.hostname,
    Number(url.port || 80),
    maxSockets,
    REQUEST_TIMEOUT_MS,
    `authorization: ${apiKey}\r\ncontent-type: application/json\r\n`,
  );
  return {
    call: (method, path, body) =>
      client.request(method, path, body).catch((err: unknown) => {
        throw new CallError(err instanceof H1CallError ? err.code : "network");
      }),
    close: () => client.close(),
  };
}

function nodeHttpSend(url: URL, apiKey: string, maxSockets: number): HttpSend {
  const agent = new Agent({ keepAlive: true, maxSockets, maxFreeSockets: maxSockets });
  return {
    call: (method, path, payload) =>
      new Promise((resolve, reject) => {
        const req = request(
          {
            agent,
            host: url.hostname,
            port: url.port,
            method,
            path,
            timeout: REQUEST_TIMEOUT_MS,
            headers: { authorization: apiKey, "content-type": "application/json", "content-length": payload.length },
          },
          (res) => {
            const chunks: Buffer[] = [];
            res.on("data", (c: Buffer) => chunks.push(c));
            res.on("error", reject);
            res.on("end", () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks) }));
          },
        );
        req.on("timeout", () => req.destroy(new CallError("timeout")));
        req.on("error", (err: NodeJS.ErrnoException) => reject(err instanceof CallError ? err : new CallError(err.code ?? "network")));
        req.end(payload);
      }),
    close: () => agent.destroy(),
  };
}

/** Connect clients of the ledger and the hold service acting for one API key. */
export interface Rpc {
  ledger: Client<typeof LedgerService>;
  hold: Client<typeof HoldService>;
  close(): void;
}

/**
 * Binary Connect over HTTP/2: one multiplexed connection per service, as a service mesh would use.
 *
 * By default the calls go through `leanClient` below, not Connect-ES's client: the load generator
 * runs on the same two cores as the system it measures (as pgbench's C client does), and Connect-ES's
 * client spent about as much CPU per call as the ledger itself (bench/README.md). The bytes on the
 * wire are the same Connect protocol. `BENCH_RPC_CLIENT=connect` measures with Connect-ES's client.
 */
export function rpcClients(ledgerUrl: string, holdUrl: string, apiKey: string): Rpc {
  if (process.env["BENCH_RPC_CLIENT"] === "connect") {
    const auth: Interceptor = (next) => async (req) => {
      req.header.set("authorization", apiKey);
      return next(req);
    };
    const transport = (baseUrl: string) =>
      createConnectTransport({
        baseUrl,
        httpVersion: "2",
        useBinaryFormat: true,
        interceptors: [auth],
        defaultTimeoutMs: REQUEST_TIMEOUT_MS,
      });
    return {
      ledger: createClient(LedgerService, transport(ledgerUrl)),
      hold: createClient(HoldService, transport(holdUrl)),
      close: () => {},
    };
  }
  const ledger = leanClient(LedgerService, ledgerUrl, apiKey);
  const hold = leanClient(HoldService, holdUrl, apiKey);
  return {
    ledger: ledger.client,
    hold: hold.client,
    close: () => {
      ledger.close();
      hold.close();
    },
  };
}

/**
 * The unary methods of `service` over one HTTP/2 connection, as the Connect protocol's unary POST:
 * the request's binary protobuf as the body, the answer's as the response (200), or the Connect
 * error JSON with its code otherwise. Nothing else of Connect-ES's client (interceptors, abort
 * signals, streaming): what a call needs and no more, so the generator's CPU stays small beside the
 * system's. The HTTP/2 framing is `H2Client`'s (`h2-wire.ts`), and the answers are read with the
 * services' own decoder; `BENCH_RPC_CLIENT=http2` sends the same bytes through node:http2 instead.
 */
export function leanClient<S extends DescService>(
  service: S,
  baseUrl: string,
  apiKey: string,
  wire: "by-hand" | "http2" = process.env["BENCH_RPC_CLIENT"] === "http2" ? "http2" : "by-hand",
): { client: Client<S>; close(): void } {
  const url = new URL(baseUrl);
  const headers = {
    "content-type": "application/proto",
    "connect-protocol-version": "1",
    "connect-timeout-ms": String(REQUEST_TIMEOUT_MS),
    authorization: apiKey,
  };
  const send = wire === "http2" ? http2Send(baseUrl, headers) : byHandRpcSend(url, headers);
  const call = async <I extends DescMessage, O extends DescMessage>(
    method: DescMethod & { input: I; output: O },
    path: string,
    init: MessageInitShape<I>,
  ): Promise<MessageShape<O>> => {
    const answer = await send.call(path, encodeBinary(method.input, create(method.input, init)));
    if (answer.status !== 200) throw new CallError(connectErrorCode(answer.status, answer.body));
    try {
      return decodeBinary(method.output, answer.body);
    } catch {
      throw new CallError("bad_response");
    }
  };
  const client: Record<string, (init: never) => Promise<unknown>> = {};
  for (const method of service.methods) {
    if (method.methodKind !== "unary") continue;
    const path = `/${service.typeName}/${method.name}`;
    client[method.localName] = (init: never) => call(method, path, init);
  }
  return { client: client as unknown as Client<S>, close: () => send.close() };
}

/** A unary POST of a body to a path, with the client's fixed headers. */
interface Send {
  call(path: string, body: Uint8Array): Promise<H2Answer>;
  close(): void;
}

/** HTTP/2 framed by hand, each path's header block encoded once. */
function byHandRpcSend(url: URL, headers: Record<string, string>): Send {
  const h2 = new H2Client(url.hostname, Number(url.port || 80), REQUEST_TIMEOUT_MS);
  const blocks = new Map<string, Buffer>();
  return {
    call: (path, body) => {
      let block = blocks.get(path);
      if (!block) {
        block = requestHeaderBlock(url.host, path, headers);
        blocks.set(path, block);
      }
      return h2.request(block, body).catch((err: unknown) => {
        throw new CallError(err instanceof H2CallError ? err.code : "network");
      });
    },
    close: () => h2.close(),
  };
}

/** The same requests through node:http2's client session, for comparison (bench/README.md). */
function http2Send(baseUrl: string, headers: Record<string, string>): Send {
  let session: ClientHttp2Session | undefined;
  const connect = () => {
    if (session && !session.closed && !session.destroyed) return session;
    const s = http2.connect(baseUrl);
    s.on("error", () => {}); // each call sees the failure through its own stream
    session = s;
    return s;
  };
  return {
    call: (path, body) =>
      new Promise<H2Answer>((resolve, reject) => {
        const stream = connect().request({ ":method": "POST", ":path": path, ...headers });
        let status = 0;
        const chunks: Buffer[] = [];
        stream.setTimeout(REQUEST_TIMEOUT_MS, () => stream.close(http2.constants.NGHTTP2_CANCEL));
        stream.on("response", (h) => {
          status = Number(h[":status"]);
        });
        stream.on("data", (chunk: Buffer) => chunks.push(chunk));
        stream.on("error", (err: NodeJS.ErrnoException) => reject(new CallError(err.code ?? "network")));
        stream.on("close", () => {
          if (status === 0) return reject(new CallError("timeout"));
          resolve({ status, body: chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks) });
        });
        stream.end(body);
      }),
    close: () => session?.close(),
  };
}

/**
 * The code a Connect error body is counted under: read back into a `ConnectError` by Connect's own
 * reader (through @ledger/connect-fast), then counted as `errorCode` counts Connect-ES's errors;
 * the HTTP status when the body is no Connect error.
 */
function connectErrorCode(status: number, body: Buffer): string {
  const error = connectErrorFromJson(body);
  return error ? errorCode(error) : `http_${status}`;
}

/** The code a failure is counted under: the domain code (`insufficient_funds`...) when there is one. */
export function errorCode(err: unknown): string {
  if (err instanceof CallError) return err.code;
  if (err instanceof ConnectError) return errorCodeOf(err).code;
  return err instanceof Error ? err.name : "exception";
}
