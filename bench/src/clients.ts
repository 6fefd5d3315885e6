// The two ways in: REST/JSON through the gateway over keep-alive HTTP/1.1, and Connect RPC straight
// to the services over one HTTP/2 connection with binary protobuf.
import { Agent, request } from "node:http";
import http2, { type ClientHttp2Session } from "node:http2";
import {
  create,
  fromBinary,
  toBinary,
  type DescMessage,
  type DescMethod,
  type DescService,
  type MessageInitShape,
  type MessageShape,
} from "@bufbuild/protobuf";
import { ConnectError, createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { errorFromJsonBytes } from "@connectrpc/connect/protocol-connect";
import { errorCodeOf } from "@ledger/common";
import { HoldService } from "@ledger/proto/hold/v1/hold_pb.js";
import { LedgerService } from "@ledger/proto/ledger/v1/ledger_pb.js";

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
 * connection and no request pays for a TCP handshake or waits for a free socket.
 */
export function restClient(restUrl: string, apiKey: string, maxSockets: number): Rest {
  const url = new URL(restUrl);
  const agent = new Agent({ keepAlive: true, maxSockets, maxFreeSockets: maxSockets });
  const send = <T>(method: string, path: string, body: unknown) => {
    const payload = Buffer.from(JSON.stringify(body));
    return new Promise<T>((resolve, reject) => {
      const req = request(
        {
          agent,
          host: url.hostname,
          port: url.port,
          method,
          path: url.pathname + path,
          timeout: REQUEST_TIMEOUT_MS,
          headers: { authorization: apiKey, "content-type": "application/json", "content-length": payload.length },
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on("data", (c: Buffer) => chunks.push(c));
          res.on("error", reject);
          res.on("end", () => {
            const text = Buffer.concat(chunks).toString("utf8");
            let parsed: { error?: { code?: string } } | undefined;
            try {
              parsed = JSON.parse(text) as { error?: { code?: string } };
            } catch {
              parsed = undefined;
            }
            if (res.statusCode !== undefined && res.statusCode < 300 && parsed) resolve(parsed as T);
            else reject(new CallError(parsed?.error?.code ?? `http_${res.statusCode}`));
          });
        },
      );
      req.on("timeout", () => req.destroy(new CallError("timeout")));
      req.on("error", (err: NodeJS.ErrnoException) => reject(err instanceof CallError ? err : new CallError(err.code ?? "network")));
      req.end(payload);
    });
  };
  return {
    post: (path, body) => send("POST", path, body),
    send,
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
 * The unary methods of `service` over one HTTP/2 session, as the Connect protocol's unary POST: the
 * request's binary protobuf as the body, the answer's as the response (200), or the Connect error
 * JSON with its code otherwise. Nothing else of Connect-ES's client (interceptors, abort signals,
 * streaming): what a call needs and no more, so the generator's CPU stays small beside the system's.
 */
export function leanClient<S extends DescService>(service: S, baseUrl: string, apiKey: string): { client: Client<S>; close(): void } {
  let session: ClientHttp2Session | undefined;
  const connect = () => {
    if (session && !session.closed && !session.destroyed) return session;
    const s = http2.connect(baseUrl);
    s.on("error", () => {}); // each call sees the failure through its own stream
    session = s;
    return s;
  };
  const call = <I extends DescMessage, O extends DescMessage>(method: DescMethod & { input: I; output: O }, init: MessageInitShape<I>) =>
    new Promise<MessageShape<O>>((resolve, reject) => {
      const stream = connect().request({
        ":method": "POST",
        ":path": `/${service.typeName}/${method.name}`,
        "content-type": "application/proto",
        "connect-protocol-version": "1",
        "connect-timeout-ms": String(REQUEST_TIMEOUT_MS),
        authorization: apiKey,
      });
      let status = 0;
      const chunks: Buffer[] = [];
      stream.setTimeout(REQUEST_TIMEOUT_MS, () => stream.close(http2.constants.NGHTTP2_CANCEL));
      stream.on("response", (headers) => {
        status = Number(headers[":status"]);
      });
      stream.on("data", (chunk: Buffer) => chunks.push(chunk));
      stream.on("error", (err: NodeJS.ErrnoException) => reject(new CallError(err.code ?? "network")));
      stream.on("close", () => {
        const body = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
        if (status === 200) {
          try {
            resolve(fromBinary(method.output, body));
          } catch {
            reject(new CallError("bad_response"));
          }
          return;
        }
        if (status === 0) return reject(new CallError("timeout"));
        reject(new CallError(connectErrorCode(status, body)));
      });
      stream.end(toBinary(method.input, create(method.input, init)));
    });
  const client: Record<string, (init: never) => Promise<unknown>> = {};
  for (const method of service.methods) {
    if (method.methodKind === "unary") client[method.localName] = (init: never) => call(method, init);
  }
  return {
    client: client as unknown as Client<S>,
    close: () => session?.close(),
  };
}

/**
 * The code a Connect error body is counted under: read back into a `ConnectError` by Connect's own
 * reader, then counted as `errorCode` counts Connect-ES's errors; the HTTP status when the body is
 * no Connect error.
 */
function connectErrorCode(status: number, body: Buffer): string {
  try {
    return errorCode(errorFromJsonBytes(body, undefined, new ConnectError(`HTTP ${status}`)));
  } catch {
    return `http_${status}`;
  }
}

/** The code a failure is counted under: the domain code (`insufficient_funds`...) when there is one. */
export function errorCode(err: unknown): string {
  if (err instanceof CallError) return err.code;
  if (err instanceof ConnectError) return errorCodeOf(err).code;
  return err instanceof Error ? err.name : "exception";
}
