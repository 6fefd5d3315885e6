import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:https";
import type { IncomingHttpHeaders } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** A self-signed certificate for 127.0.0.1 and localhost; its PEM is also the CA to trust. */
export interface TestCertificate {
  cert: string;
  key: string;
}

let cached: TestCertificate | undefined;

/** Makes (once per process) a short-lived self-signed certificate with openssl. */
export function testCertificate(): TestCertificate {
  if (cached) return cached;
  const dir = mkdtempSync(join(tmpdir(), "ledger-cert-"));
  try {
    execFileSync(
      "openssl",
      [
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        join(dir, "key.pem"),
        "-out",
        join(dir, "cert.pem"),
        "-days",
        "2",
        "-subj",
        "/CN=localhost",
        "-addext",
        "subjectAltName=IP:127.0.0.1,DNS:localhost",
      ],
      { stdio: "ignore" },
    );
    cached = { cert: readFileSync(join(dir, "cert.pem"), "utf8"), key: readFileSync(join(dir, "key.pem"), "utf8") };
    return cached;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** One request the receiver got. */
export interface ReceivedWebhook {
  path: string;
  headers: IncomingHttpHeaders;
  body: string;
  at: number;
}

/** What a path answers, after `delayMs` when given (a slow receiver); "hang" never answers. */
export type Reply = { status: number; body?: string; headers?: Record<string, string>; delayMs?: number } | "hang";

/** A real HTTPS server on 127.0.0.1, port 0, recording every request per path. */
export interface WebhookReceiver {
  /** `https://127.0.0.1:<port>` */
  origin: string;
  /** The PEM to trust for it. */
  ca: string;
  /** A URL on the receiver whose answers `reply` decides (default 200); its requests are recorded. */
  endpoint(path: string, reply?: (n: number, req: ReceivedWebhook) => Reply): string;
  received(path: string): ReceivedWebhook[];
  /** TLS connections accepted so far (each one a full or resumed handshake). */
  connections(): number;
  close(): Promise<void>;
}

/** Starts a receiver. */
export async function startWebhookReceiver(): Promise<WebhookReceiver> {
  const { cert, key } = testCertificate();
  const replies = new Map<string, (n: number, req: ReceivedWebhook) => Reply>();
  const log = new Map<string, ReceivedWebhook[]>();
  const server: Server = createServer({ cert, key }, (req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const path = (req.url ?? "/").split("?")[0]!;
      const got: ReceivedWebhook = { path, headers: req.headers, body: Buffer.concat(chunks).toString("utf8"), at: Date.now() };
      const list = log.get(path) ?? [];
      list.push(got);
      log.set(path, list);
      const reply: Reply = (replies.get(path) ?? ((): Reply => ({ status: 200, body: "ok" })))(list.length, got);
      if (reply === "hang") return;
      const answer = () => {
        res.writeHead(reply.status, { "content-type": "text/plain", ...(reply.headers ?? {}) });
        res.end(reply.body ?? "");
      };
      if (reply.delayMs) setTimeout(answer, reply.delayMs);
      else answer();
    });
  });
  let connections = 0;
  server.on("secureConnection", () => connections++);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", () => resolve()));
  const origin = `https://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    origin,
    ca: cert,
    endpoint(path, reply) {
      if (reply) replies.set(path, reply);
      return origin + path;
    },
    received: (path) => log.get(path) ?? [],
    connections: () => connections,
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
