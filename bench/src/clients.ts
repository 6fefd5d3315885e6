// The two ways in: REST/JSON through the gateway over keep-alive HTTP/1.1, and Connect RPC straight
// to the services over one HTTP/2 connection with binary protobuf.
import { Agent, request } from "node:http";
import { ConnectError, createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
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
}

/** Binary Connect over HTTP/2: one multiplexed connection per service, as a service mesh would use. */
export function rpcClients(ledgerUrl: string, holdUrl: string, apiKey: string): Rpc {
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
  return { ledger: createClient(LedgerService, transport(ledgerUrl)), hold: createClient(HoldService, transport(holdUrl)) };
}

/** The code a failure is counted under: the domain code (`insufficient_funds`...) when there is one. */
export function errorCode(err: unknown): string {
  if (err instanceof CallError) return err.code;
  if (err instanceof ConnectError) return errorCodeOf(err).code;
  return err instanceof Error ? err.name : "exception";
}
