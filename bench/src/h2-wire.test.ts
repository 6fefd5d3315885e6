import http2 from "node:http2";
import { type AddressInfo, createServer, type Server } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { H2CallError, H2Client, hpackInteger, requestHeaderBlock, statusOf } from "./h2-wire.js";

// The hand-framed client against node's own HTTP/2 server (nghttp2), which encodes the answers'
// headers as the services' servers do: each status in each form nghttp2 picks, bodies larger than
// every flow-control window in both directions, many calls at once, and the ways a call can end
// without an answer.
describe("H2Client", () => {
  let server: http2.Http2Server;
  let port: number;
  const sessions = new Set<http2.ServerHttp2Session>();
  const authorities: string[] = [];

  beforeAll(async () => {
    server = http2.createServer();
    server.on("session", (session) => sessions.add(session));
    server.on("stream", (stream, headers) => {
      stream.on("error", () => {}); // the reset case ends its own stream
      authorities.push(`${headers[":authority"]} ${headers["authorization"]}`);
      const [, action, arg] = String(headers[":path"]).split("/");
      const chunks: Buffer[] = [];
      stream.on("data", (c: Buffer) => chunks.push(c));
      stream.on("end", () => {
        const body = Buffer.concat(chunks);
        if (action === "status") {
          stream.respond({ ":status": Number(arg), "content-type": "application/json" });
          // 204 and 304 carry no body.
          stream.end(arg === "204" || arg === "304" ? undefined : `{"status":${arg}}`);
        } else if (action === "echo") {
          // The body's length and its first and last bytes, so a lost or reordered frame shows.
          stream.respond({ ":status": 200 });
          stream.end(`${body.length} ${body[0]} ${body[body.length - 1]}`);
        } else if (action === "big") {
          stream.respond({ ":status": 200 });
          stream.end(Buffer.alloc(Number(arg), 7));
        } else if (action === "long-header") {
          stream.respond({ ":status": 201, "x-long": "v".repeat(40_000) });
          stream.end("ok");
        } else if (action === "reset") {
          stream.close(http2.constants.NGHTTP2_INTERNAL_ERROR);
        } else if (action === "goaway") {
          // A graceful GOAWAY: this call is still answered, the next goes to a new connection.
          stream.session?.goaway(http2.constants.NGHTTP2_NO_ERROR);
          stream.respond({ ":status": 200 });
          stream.end("bye");
        }
        // "hang": never answered.
      });
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    port = (server.address() as AddressInfo).port;
  });
  afterAll(async () => {
    for (const session of sessions) session.destroy();
    await new Promise((resolve) => server.close(resolve));
  });

  const block = (path: string) => requestHeaderBlock(`127.0.0.1:${port}`, path, { authorization: "key_h2" });
  const text = async (client: H2Client, path: string, body = Buffer.from("x")) => {
    const answer = await client.request(block(path), body);
    return { status: answer.status, body: answer.body.toString() };
  };

  it("reads every status nghttp2 sends, indexed, literal and Huffman-coded alike", async () => {
    const client = new H2Client("127.0.0.1", port, 5000);
    try {
      // 200-500 of the static table are indexed; the rest are literals, Huffman-coded when shorter.
      for (const status of [200, 201, 204, 206, 304, 400, 401, 403, 404, 409, 412, 422, 429, 500, 501, 503, 504]) {
        const body = status === 204 || status === 304 ? "" : `{"status":${status}}`;
        expect(await text(client, `/status/${status}`)).toEqual({ status, body });
      }
      expect(authorities).toContain(`127.0.0.1:${port} key_h2`);
    } finally {
      client.close();
    }
  });

  it("sends and receives bodies larger than every window, in order", async () => {
    const client = new H2Client("127.0.0.1", port, 5000);
    try {
      // Past the server's 65,535-byte initial windows, so the body waits for WINDOW_UPDATE.
      const body = Buffer.alloc(300_000, 1);
      body[0] = 2;
      body[body.length - 1] = 3;
      const [a, b] = await Promise.all([text(client, "/echo", body), text(client, "/echo", body)]);
      expect(a).toEqual({ status: 200, body: "300000 2 3" });
      expect(b).toEqual(a);
      const big = await client.request(block("/big/1000000"), Buffer.from("x"));
      expect(big.body.length).toBe(1_000_000);
      expect(big.body.every((byte) => byte === 7)).toBe(true);
    } finally {
      client.close();
    }
  });

  it("answers many calls at once on one connection", async () => {
    const client = new H2Client("127.0.0.1", port, 5000);
    const before = sessions.size;
    try {
      const answers = await Promise.all(Array.from({ length: 500 }, (_, i) => text(client, `/status/${i % 2 ? 200 : 409}`)));
      expect(answers.filter((a) => a.status === 200)).toHaveLength(250);
      expect(answers.filter((a) => a.status === 409)).toHaveLength(250);
      expect(sessions.size - before).toBe(1);
    } finally {
      client.close();
    }
  });

  it("reads a status whose header block continues over CONTINUATION frames", async () => {
    const client = new H2Client("127.0.0.1", port, 5000);
    try {
      expect(await text(client, "/long-header")).toEqual({ status: 201, body: "ok" });
    } finally {
      client.close();
    }
  });

  it("fails a reset call and an unanswered call, and after a GOAWAY goes on with a new connection", async () => {
    const client = new H2Client("127.0.0.1", port, 300);
    try {
      await expect(client.request(block("/reset"), Buffer.from("x"))).rejects.toEqual(new H2CallError("reset"));
      const before = sessions.size;
      expect(await text(client, "/goaway")).toEqual({ status: 200, body: "bye" });
      expect(await text(client, "/status/200")).toEqual({ status: 200, body: `{"status":200}` });
      expect(sessions.size - before).toBe(1);
      const started = Date.now();
      await expect(client.request(block("/hang"), Buffer.from("x"))).rejects.toEqual(new H2CallError("timeout"));
      expect(Date.now() - started).toBeLessThan(5000);
      expect(await text(client, "/status/200")).toEqual({ status: 200, body: `{"status":200}` });
    } finally {
      client.close();
    }
  });

  it("fails every call when the server is gone, and reconnects once it is back", async () => {
    const lone = http2.createServer((_req, res) => {
      res.writeHead(200);
      res.end("back");
    });
    await new Promise<void>((resolve) => lone.listen(0, "127.0.0.1", resolve));
    const lonePort = (lone.address() as AddressInfo).port;
    const loneSessions = new Set<http2.ServerHttp2Session>();
    lone.on("session", (s) => loneSessions.add(s));
    const client = new H2Client("127.0.0.1", lonePort, 5000);
    const path = requestHeaderBlock(`127.0.0.1:${lonePort}`, "/", {});
    try {
      expect((await client.request(path, Buffer.from("x"))).body.toString()).toBe("back");
      for (const s of loneSessions) s.destroy();
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect((await client.request(path, Buffer.from("x"))).body.toString()).toBe("back");
      await new Promise<void>((resolve) => {
        for (const s of loneSessions) s.destroy();
        lone.close(() => resolve());
      });
      await expect(client.request(path, Buffer.from("x"))).rejects.toEqual(new H2CallError("network"));
    } finally {
      client.close();
    }
    await expect(client.request(path, Buffer.from("x"))).rejects.toEqual(new H2CallError("network"));
  });
});

describe("H2Client against a server that refuses every stream", () => {
  let raw: Server;
  beforeAll(async () => {
    // Answers the preface with its SETTINGS and a GOAWAY whose last stream is 0: no call was seen.
    raw = createServer((socket) => {
      socket.once("data", () => {
        const settings = Buffer.from([0, 0, 0, 0x4, 0, 0, 0, 0, 0]);
        const goaway = Buffer.from([0, 0, 8, 0x7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        socket.write(Buffer.concat([settings, goaway]));
      });
      socket.on("error", () => {});
    });
    await new Promise<void>((resolve) => raw.listen(0, "127.0.0.1", resolve));
  });
  afterAll(() => new Promise<void>((resolve) => raw.close(() => resolve())));

  it("fails the calls the GOAWAY says the server never processed", async () => {
    const port = (raw.address() as AddressInfo).port;
    const client = new H2Client("127.0.0.1", port, 5000);
    try {
      const path = requestHeaderBlock(`127.0.0.1:${port}`, "/", {});
      const calls = [client.request(path, Buffer.from("a")), client.request(path, Buffer.from("b"))];
      for (const call of calls) await expect(call).rejects.toEqual(new H2CallError("network"));
    } finally {
      client.close();
    }
  });
});

describe("HPACK pieces", () => {
  it("encodes integers with any prefix as RFC 7541's examples do", () => {
    expect([...hpackInteger(10, 5, 0)]).toEqual([10]);
    expect([...hpackInteger(1337, 5, 0)]).toEqual([31, 154, 10]);
    expect([...hpackInteger(42, 8, 0)]).toEqual([42]);
  });

  it("refuses a block that does not begin with a status it can read", () => {
    expect(statusOf(Buffer.from([]))).toBeUndefined();
    expect(statusOf(Buffer.from([0x82]))).toBeUndefined(); // :method GET, not a status
    expect(statusOf(Buffer.from([0xbe]))).toBeUndefined(); // a dynamic table entry: we asked for none
    expect(statusOf(Buffer.from([0x08, 0x03, 0x34, 0x30]))).toBeUndefined(); // a value shorter than declared
    expect(statusOf(Buffer.from([0x08, 0x03, 0x61, 0x62, 0x63]))).toBeUndefined(); // not digits
    expect(statusOf(Buffer.from([0x20, 0x88]))).toBe(200); // a table size update, then 200
    expect(statusOf(Buffer.from([0x08, 0x03, 0x34, 0x30, 0x39]))).toBe(409);
  });
});
