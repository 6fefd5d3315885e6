import http from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { H1CallError, H1Client, parseAnswer } from "./http1-wire.js";

// The hand-written HTTP/1.1 client against node's own HTTP server, which the gateway runs on:
// lengths and chunked answers, a server that closes, more calls than sockets, and calls that end
// without an answer.
describe("H1Client", () => {
  let server: http.Server;
  let port: number;
  /** Connections the server has accepted, ever. */
  let accepted = 0;
  const seen: string[] = [];

  beforeAll(async () => {
    server = http.createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", () => {
        const body = Buffer.concat(chunks).toString();
        seen.push(`${req.method} ${req.url} ${req.headers["authorization"]} ${req.headers["content-type"]} ${body}`);
        const [, action, arg] = String(req.url).split("/");
        if (action === "json") {
          res.writeHead(Number(arg ?? 200), { "content-type": "application/json" });
          res.end(JSON.stringify({ echo: body }));
        } else if (action === "chunked") {
          res.writeHead(200);
          res.write("first,");
          setTimeout(() => res.end("second"), 5);
        } else if (action === "empty") {
          res.writeHead(204);
          res.end();
        } else if (action === "close") {
          res.writeHead(200, { connection: "close" });
          res.end("closing");
        } else if (action === "slow") {
          setTimeout(() => res.end(`slow ${body}`), 20);
        } else if (action === "drop") {
          req.socket.destroy();
        }
        // "hang": never answered.
      });
    });
    server.on("connection", () => {
      accepted++;
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    port = (server.address() as AddressInfo).port;
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });

  const client = (maxSockets = 2, timeoutMs = 5000) =>
    new H1Client("127.0.0.1", port, maxSockets, timeoutMs, "authorization: key_h1\r\ncontent-type: application/json\r\n");
  const text = async (c: H1Client, path: string, body = "{}") => {
    const answer = await c.request("POST", path, Buffer.from(body));
    return { status: answer.status, body: answer.body.toString() };
  };

  it("sends the method, path, headers and body, and reads answers by length, chunks or none", async () => {
    const c = client();
    try {
      expect(await text(c, "/json/201", '{"a":1}')).toEqual({ status: 201, body: JSON.stringify({ echo: '{"a":1}' }) });
      expect(seen).toContain('POST /json/201 key_h1 application/json {"a":1}');
      expect(await text(c, "/json/409")).toEqual({ status: 409, body: JSON.stringify({ echo: "{}" }) });
      expect(await text(c, "/chunked")).toEqual({ status: 200, body: "first,second" });
      expect(await text(c, "/empty")).toEqual({ status: 204, body: "" });
      const put = await c.request("PUT", "/json", Buffer.from("x"));
      expect(put.status).toBe(200);
      expect(seen).toContain("PUT /json key_h1 application/json x");
    } finally {
      c.close();
    }
  });

  it("keeps each connection for the next call, and opens a new one when the server closes it", async () => {
    const c = client(1);
    try {
      const before = accepted;
      for (let i = 0; i < 5; i++) expect((await text(c, "/json")).status).toBe(200);
      expect(accepted - before).toBe(1);
      expect(await text(c, "/close")).toEqual({ status: 200, body: "closing" });
      expect(await text(c, "/json")).toEqual({ status: 200, body: JSON.stringify({ echo: "{}" }) });
      expect(accepted - before).toBe(2);
    } finally {
      c.close();
    }
  });

  it("queues calls beyond its sockets and answers each with its own body", async () => {
    const c = client(3);
    try {
      const before = accepted;
      const answers = await Promise.all(Array.from({ length: 30 }, (_, i) => text(c, "/slow", String(i))));
      expect(answers.map((a) => a.body)).toEqual(Array.from({ length: 30 }, (_, i) => `slow ${i}`));
      expect(accepted - before).toBe(3);
    } finally {
      c.close();
    }
  });

  it("fails a dropped call and an unanswered one, and goes on", async () => {
    const c = client(1, 300);
    try {
      await expect(c.request("POST", "/drop", Buffer.from("x"))).rejects.toEqual(new H1CallError("network"));
      const started = Date.now();
      await expect(c.request("POST", "/hang", Buffer.from("x"))).rejects.toEqual(new H1CallError("timeout"));
      expect(Date.now() - started).toBeLessThan(5000);
      expect((await text(c, "/json")).status).toBe(200);
    } finally {
      c.close();
    }
    await expect(c.request("POST", "/json", Buffer.from("x"))).rejects.toEqual(new H1CallError("network"));
  });
});

describe("parseAnswer", () => {
  const answer = "HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello";
  const chunked = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n";

  it("waits for every byte of an answer, wherever it is split", () => {
    for (const whole of [answer, chunked]) {
      for (let cut = 0; cut < whole.length; cut++) expect(parseAnswer(Buffer.from(whole.slice(0, cut)))).toBeUndefined();
    }
    expect(parseAnswer(Buffer.from(answer))?.answer.body.toString()).toBe("hello");
    expect(parseAnswer(Buffer.from(chunked))?.answer.body.toString()).toBe("abcde");
  });

  it("knows whether the server keeps the connection", () => {
    expect(parseAnswer(Buffer.from(answer))?.keepAlive).toBe(true);
    expect(parseAnswer(Buffer.from("HTTP/1.1 200 OK\r\nConnection: close\r\ncontent-length: 0\r\n\r\n"))?.keepAlive).toBe(false);
    expect(parseAnswer(Buffer.from("HTTP/1.0 200 OK\r\ncontent-length: 0\r\n\r\n"))?.keepAlive).toBe(false);
  });

  it("throws on what it cannot read", () => {
    expect(() => parseAnswer(Buffer.from("SPDY/3 200\r\n\r\n"))).toThrow();
    expect(() => parseAnswer(Buffer.from("HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n"))).toThrow();
    expect(() => parseAnswer(Buffer.from("HTTP/1.1 200 OK\r\n\r\nbody until close"))).toThrow();
    expect(() => parseAnswer(Buffer.from("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n"))).toThrow();
  });
});
