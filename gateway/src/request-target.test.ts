import * as http from "node:http";
import * as net from "node:net";
import { afterAll, beforeAll, expect, it } from "vitest";
import { startStack, type Stack } from "@ledger/e2e";

// A request target the URL parser refuses (`//%`, `//[`) is the client's mistake: 400 in the error
// envelope on every port, and the process keeps serving. Sent with http.request, which passes
// the path through exactly as given (fetch would normalise it first).

let stack: Stack;
beforeAll(async () => {
  stack = await startStack();
});
afterAll(async () => stack?.close());

function raw(baseUrl: string, method: string, path: string): Promise<{ status: number; body: string }> {
  const { hostname, port } = new URL(baseUrl);
  return new Promise((resolve, reject) => {
    const req = http.request({ host: hostname, port, method, path, agent: false, headers: { "content-length": "0" } }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (chunk: string) => (body += chunk));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on("error", reject);
    // A request the server never answers fails fast instead of at the test timeout.
    req.setTimeout(5_000, () => req.destroy(new Error("no answer")));
    req.end();
  });
}

const TARGETS: [string, string][] = [
  ["GET", "//%"],
  ["GET", "//["],
  ["POST", "//["],
  ["GET", "//%/v1/entities"],
];

it.each(TARGETS)("the gateway answers %s %s with 400 invalid_request and keeps serving", async (method, path) => {
  const res = await raw(stack.gateway.server.url, method, path);
  expect(res.status).toBe(400);
  expect(JSON.parse(res.body)).toMatchObject({ status: "error", error: { code: "invalid_request" } });
  expect((await stack.api.get("/programs")).status).toBe(200);
});

it("answers a request without a Host (HTTP/1.0) or with a Host that is no host 400 on every port, RPC paths included", async () => {
  const requests = [
    "POST /ledger.v1.LedgerService/ListPrograms HTTP/1.0\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}",
    "POST /ledger.v1.LedgerService/ListPrograms HTTP/1.1\r\nhost: [\r\ncontent-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}",
    "GET /v1/programs HTTP/1.1\r\nhost: a b\r\nconnection: close\r\n\r\n",
  ];
  for (const url of [stack.ledgerUrl, stack.gateway.server.url]) {
    for (const request of requests) {
      const answer = await overTcp(url, request);
      expect(answer, request).toMatch(/^HTTP\/1\.1 400 /);
      expect(answer, request).toContain('"code":"invalid_request"');
    }
  }
});

/** Writes `request` on a new connection as given and reads until the server closes it. */
function overTcp(baseUrl: string, request: string): Promise<string> {
  const { hostname, port } = new URL(baseUrl);
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(port), hostname, () => socket.end(request));
    let answer = "";
    socket.setEncoding("utf8");
    socket.on("data", (text: string) => (answer += text));
    socket.on("close", () => resolve(answer));
    socket.on("error", reject);
    socket.setTimeout(5_000, () => socket.destroy());
  });
}

it.each(TARGETS)("a service port answers %s %s with 400 invalid_request and keeps serving", async (method, path) => {
  for (const url of [stack.ledgerUrl, stack.hold!.server.url]) {
    const res = await raw(url, method, path);
    expect(res.status).toBe(400);
    expect(JSON.parse(res.body)).toMatchObject({ status: "error", error: { code: "invalid_request" } });
    expect((await raw(url, "GET", "/healthz")).status).toBe(200);
  }
});
