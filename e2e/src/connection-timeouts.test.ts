import * as http2 from "node:http2";
import * as net from "node:net";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { Health, HealthCheckResponse_ServingStatus } from "@ledger/proto/grpc/health/v1/health_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startStack, type Stack } from "./index.js";

// Every listening port closes a connection that holds a socket without using it: one that sends
// nothing or not a request's whole headers within HTTP_HEADER_TIMEOUT_MS, and one idle (an HTTP/2
// session with no open stream, whatever PINGs it sends) for HTTP_IDLE_TIMEOUT_MS. Here both are
// short, on the gateway's public and ops ports and on the ledger's RPC port; what legitimately
// stays long (a server stream, the gateway's kept-alive connections to the services) is not cut.

const HEADER_MS = 300;
const IDLE_MS = 1_000;
/** How long a test waits for a close the server should have made, past which it counts as never. */
const NEVER_MS = 5_000;

const PREFACE = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
/** An empty SETTINGS frame: length 0, type 4, no flags, stream 0. */
const SETTINGS = Buffer.from([0, 0, 0, 4, 0, 0, 0, 0, 0]);

/**
 * Connects to `url`'s port, writes `bytes` (if any) and resolves with how many milliseconds passed
 * until the server closed the connection, or Infinity when it had not after NEVER_MS.
 */
function closedAfter(url: string, bytes?: Buffer): Promise<number> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(port), hostname);
    let started = 0;
    const never = setTimeout(() => {
      socket.destroy();
      resolve(Number.POSITIVE_INFINITY);
    }, NEVER_MS);
    socket.once("connect", () => {
      started = performance.now();
      if (bytes) socket.write(bytes);
    });
    socket.on("data", () => {});
    socket.once("error", (err) => {
      if (!started) reject(err);
    });
    socket.once("close", () => {
      clearTimeout(never);
      resolve(performance.now() - started);
    });
  });
}

describe("connection timeouts on every port", () => {
  let stack: Stack;
  beforeAll(async () => {
    const timeouts = { headerTimeoutMs: HEADER_MS, idleTimeoutMs: IDLE_MS };
    stack = await startStack({ gateway: timeouts, ledger: timeouts });
  });
  afterAll(async () => stack?.close());

  const ports = () => [
    ["the gateway's public port", stack.gateway.server.url],
    ["the gateway's ops port", stack.gateway.ops.url],
    ["the ledger's RPC port", stack.ledgerUrl],
  ];

  it("closes a connection that sends nothing after the header timeout", async () => {
    for (const [port, url] of ports()) {
      const ms = await closedAfter(url!);
      expect(ms, port).toBeGreaterThanOrEqual(HEADER_MS - 50);
      expect(ms, port).toBeLessThan(IDLE_MS);
    }
  });

  it("closes an HTTP/1.1 connection whose request headers never end after the header timeout", async () => {
    for (const [port, url] of ports()) {
      const ms = await closedAfter(url!, Buffer.from("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: "));
      expect(ms, port).toBeGreaterThanOrEqual(HEADER_MS - 50);
      expect(ms, port).toBeLessThan(IDLE_MS);
    }
  });

  it("closes a kept-alive HTTP/1.1 connection after the idle timeout once its request is answered", async () => {
    for (const [port, url] of ports()) {
      const ms = await closedAfter(url!, Buffer.from("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"));
      expect(ms, port).toBeGreaterThanOrEqual(IDLE_MS - 50);
      expect(ms, port).toBeLessThan(NEVER_MS);
    }
  });

  it("closes an HTTP/2 session that sends only its preface and SETTINGS after the idle timeout", async () => {
    for (const [port, url] of ports()) {
      const ms = await closedAfter(url!, Buffer.concat([PREFACE, SETTINGS]));
      expect(ms, port).toBeGreaterThanOrEqual(IDLE_MS - 50);
      expect(ms, port).toBeLessThan(NEVER_MS);
    }
  });

  it("closes an HTTP/2 session whose calls are over after the idle timeout, PINGs or not", async () => {
    for (const [port, url] of ports()) {
      const session = http2.connect(url!);
      session.on("error", () => {});
      const closed = new Promise<number>((resolve) => session.once("close", () => resolve(performance.now())));
      const answered = await new Promise<number>((resolve, reject) => {
        const req = session.request({ ":path": "/healthz" });
        req.on("response", (headers) => expect(headers[":status"], port).toBe(200));
        req.on("data", () => {});
        req.on("error", reject);
        req.on("close", () => resolve(performance.now()));
        req.end();
      });
      // A PING every 100 ms is activity of a kind, but not a call: it does not keep the session.
      const pings = setInterval(() => {
        if (!session.closed && !session.destroyed) session.ping(() => {});
      }, 100);
      const ms = (await Promise.race([closed, new Promise<number>((resolve) => setTimeout(resolve, NEVER_MS, Infinity))])) - answered;
      clearInterval(pings);
      session.destroy();
      expect(ms, port).toBeGreaterThanOrEqual(IDLE_MS - 50);
      expect(ms, port).toBeLessThan(NEVER_MS);
    }
  });

  it("keeps an HTTP/2 session whose server stream stays open past the idle timeout", async () => {
    const transport = createConnectTransport({ baseUrl: stack.ledgerUrl, httpVersion: "2" });
    const watching = new AbortController();
    const statuses: HealthCheckResponse_ServingStatus[] = [];
    let ended: unknown = "not ended";
    const watch = (async () => {
      try {
        for await (const answer of createClient(Health, transport).watch({ service: "" }, { signal: watching.signal }))
          statuses.push(answer.status);
        ended = "ended by the server";
      } catch (err) {
        ended = err;
      }
    })();
    await expect.poll(() => statuses).toEqual([HealthCheckResponse_ServingStatus.SERVING]);
    await new Promise((resolve) => setTimeout(resolve, 3 * IDLE_MS));
    expect(ended).toBe("not ended");
    watching.abort();
    await watch;
    expect(ConnectError.from(ended).code).toBe(Code.Canceled);
  });

  it("lets the gateway call a service again after the service closed its idle connection", async () => {
    const entity = await stack.api.post("/entity", { entity_name: "before", entity_type: "customer" });
    expect(entity.status).toBe(200);
    // The ledger closes the gateway's connection once it has been idle for IDLE_MS.
    await new Promise((resolve) => setTimeout(resolve, IDLE_MS + 500));
    const again = await stack.api.get(`/entity?entity_id=${entity.body.entity.entity_id}`);
    expect(again.status).toBe(200);
    expect(again.body.entity.entity_name).toBe("before");
  });
});
