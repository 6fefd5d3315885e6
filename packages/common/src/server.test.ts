import * as http from "node:http";
import * as http2 from "node:http2";
import * as net from "node:net";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, type ConnectRouter } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { GetProgramRequestSchema, GetProgramResponseSchema, LedgerService } from "@ledger/proto/ledger/v1/ledger_pb.js";
import { http2Request } from "@ledger/testing";
import pino from "pino";
import { afterEach, describe, expect, it } from "vitest";
import { encodeGrpcMessage, respecGrpcMessage } from "./grpc-message.js";
import { listen, type RunningServer } from "./server.js";

// The last-resort handler: whatever a request handler throws or rejects with ends that one
// request with a 500, never the process. Then how HTTP/2 requests are served.

let server: RunningServer | undefined;
afterEach(async () => {
  await server?.close();
  server = undefined;
});

function get(url: string, path: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    http
      .get(url + path, { agent: false }, (res) => {
        let body = "";
        res.setEncoding("utf8");
        res.on("data", (chunk: string) => (body += chunk));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
      })
      .on("error", reject)
      // A request the server never answers fails fast instead of at the test timeout.
      .setTimeout(5_000, function (this: http.ClientRequest) {
        this.destroy(new Error("no answer"));
      });
  });
}

it.each([
  [
    "throws",
    () => {
      throw new Error("boom");
    },
  ],
  [
    "rejects",
    async () => {
      throw new Error("boom");
    },
  ],
])("a fallback that %s answers 500 in the envelope, and the server keeps serving", async (_how, fail) => {
  const logged: unknown[] = [];
  const log = pino({ level: "error" }, { write: (line: string) => void logged.push(JSON.parse(line)) });
  server = await listen({
    name: "test",
    host: "127.0.0.1",
    port: 0,
    log,
    fallback: (req, res) => {
      if (req.url === "/fail") return fail();
      (res as http.ServerResponse).end("ok");
      return undefined;
    },
    readiness: {},
  });
  const res = await get(server.url, "/fail");
  expect(res.status).toBe(500);
  expect(JSON.parse(res.body)).toMatchObject({ status: "error", error: { code: "internal" } });
  expect(res.body).not.toContain("boom");
  expect(logged).toContainEqual(
    expect.objectContaining({ method: "GET", path: "/fail", err: expect.objectContaining({ message: "boom" }) }),
  );
  expect(await get(server.url, "/fine")).toEqual({ status: 200, body: "ok" });
  expect((await get(server.url, "/healthz")).status).toBe(200);
});

// HTTP/2 streams: unary binary calls are served on the stream itself, everything else through
// node's compatibility request and response, as a server with a request listener would.
describe("HTTP/2 on the shared port", () => {
  const routes = (router: ConnectRouter) =>
    router.service(LedgerService, {
      getProgram: (req) => ({ program: { programId: req.programId } }),
    });

  async function start(logged: unknown[] = []) {
    const log = pino({ level: "error" }, { write: (line: string) => void logged.push(JSON.parse(line)) });
    server = await listen({ name: "test", host: "127.0.0.1", port: 0, log, routes, readiness: {} });
    return server;
  }

  const getProgram = (programId: string) => toBinary(GetProgramRequestSchema, create(GetProgramRequestSchema, { programId }));
  const call = (authority?: string): http2.OutgoingHttpHeaders => ({
    ":method": "POST",
    ":path": "/ledger.v1.LedgerService/GetProgram",
    ...(authority === undefined ? {} : { ":authority": authority }),
    "content-type": "application/proto",
  });

  it("answers a unary binary call from the stream, with Connect's headers", async () => {
    const { url } = await start();
    const answer = await http2Request(url, call(), getProgram("prg_one"));
    expect(answer.status).toBe(200);
    expect(answer.headers["content-type"]).toBe("application/proto");
    expect(answer.headers.date).toBeDefined();
    expect(fromBinary(GetProgramResponseSchema, answer.body).program?.programId).toBe("prg_one");
  });

  it("refuses a call whose authority makes no URL with 400, as it does every other request", async () => {
    const { url } = await start();
    const answer = await http2Request(url, call("["), getProgram("prg_one"));
    expect(answer.status).toBe(400);
    expect(JSON.parse(answer.body.toString())).toMatchObject({ status: "error", error: { code: "invalid_request" } });
  });

  it("serves the ops endpoints and connect-node's requests through the compatibility objects", async () => {
    const { url } = await start();
    const health = await http2Request(url, { ":method": "GET", ":path": "/healthz" });
    expect(health.status).toBe(200);
    expect(JSON.parse(health.body.toString())).toEqual({ status: "ok" });
    // JSON is not the fast path's: connect-node answers it.
    const json = await http2Request(url, { ...call(), "content-type": "application/json" }, Buffer.from('{"programId":"prg_j"}'));
    expect(json.status).toBe(200);
    expect(JSON.parse(json.body.toString())).toEqual({ program: { programId: "prg_j" } });
    const expectation = await http2Request(url, { ":method": "GET", ":path": "/healthz", expect: "something" });
    expect(expectation.status).toBe(417);
  });

  it("keeps serving after clients reset their streams before the body ended, and logs no failure", async () => {
    const logged: unknown[] = [];
    const { url } = await start(logged);
    for (let i = 0; i < 20; i++) {
      const session = http2.connect(url);
      session.on("error", () => {});
      const req = session.request({ ...call(), "content-length": "64" });
      req.on("error", () => {});
      req.write(Buffer.alloc(8));
      await new Promise((resolve) => setTimeout(resolve, 5));
      // Half the streams are reset alone, half go with their connection.
      if (i % 2 === 0) req.close(http2.constants.NGHTTP2_CANCEL);
      else session.destroy();
      await new Promise((resolve) => req.once("close", resolve));
      session.destroy();
    }
    const answer = await http2Request(url, call(), getProgram("prg_after"));
    expect(answer.status).toBe(200);
    expect(fromBinary(GetProgramResponseSchema, answer.body).program?.programId).toBe("prg_after");
    expect(logged).toEqual([]);
  });
});

// Deadlines that bytes sent slowly do not push back: a socket's own timeout (node's keep-alive
// timeout) restarts with every byte, so a client trickling its headers would hold it for ever.
describe("connection deadlines", () => {
  /** Writes `first`, then one more byte of an unfinished header every 50 ms; resolves with how long the server took to close. */
  function trickle(url: string, first: string): Promise<number> {
    const { port } = new URL(url);
    return new Promise((resolve) => {
      const socket = net.connect(Number(port), "127.0.0.1");
      const started = performance.now();
      let drip: NodeJS.Timeout | undefined;
      socket.once("connect", () => {
        socket.write(first);
        drip = setInterval(() => socket.write("a"), 50);
      });
      socket.on("data", () => {});
      socket.on("error", () => {});
      const never = setTimeout(() => socket.destroy(), 5_000);
      socket.once("close", () => {
        clearInterval(drip);
        clearTimeout(never);
        resolve(performance.now() - started);
      });
    });
  }

  it("closes a connection whose first request's headers trickle in after the header timeout", async () => {
    server = await listen({
      name: "test",
      host: "127.0.0.1",
      port: 0,
      log: pino({ level: "silent" }),
      readiness: {},
      headerTimeoutMs: 300,
    });
    const ms = await trickle(server.url, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ");
    expect(ms).toBeGreaterThanOrEqual(250);
    expect(ms).toBeLessThan(1_500);
  });

  it("closes a kept-alive connection whose next request's headers trickle in after the idle timeout", async () => {
    server = await listen({ name: "test", host: "127.0.0.1", port: 0, log: pino({ level: "silent" }), readiness: {}, idleTimeoutMs: 500 });
    const ms = await trickle(server.url, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ");
    expect(ms).toBeGreaterThanOrEqual(450);
    expect(ms).toBeLessThan(2_000);
  });
});

// gRPC's status message on the wire: percent-encoded only outside printable ASCII and for `%`, as
// gRPC's spec says, so grpc-js (which decodes with decodeURI) shows `:` and `/` as they are, and
// Connect's own clients (decodeURIComponent) still read the same message.
describe("grpc-message", () => {
  const MESSAGE = "header: send failed, 100% of /v1/x \u00e9t\u00e9\nnext line";
  const ON_THE_WIRE = "header: send failed, 100%25 of /v1/x %C3%A9t%C3%A9%0Anext line";
  const routes = (router: ConnectRouter) =>
    router.service(LedgerService, {
      getProgram: () => {
        throw new ConnectError(MESSAGE, Code.FailedPrecondition);
      },
    });

  it("encodes printable ASCII as it is and every other byte, and `%`, as %XX", () => {
    expect(encodeGrpcMessage(MESSAGE)).toBe(ON_THE_WIRE);
    expect(encodeGrpcMessage(" ~")).toBe(" ~");
    expect(encodeGrpcMessage("\u007f\u0000")).toBe("%7F%00");
    expect(respecGrpcMessage(encodeURIComponent(MESSAGE))).toBe(ON_THE_WIRE);
    expect(respecGrpcMessage("50%")).toBe("50%");
  });

  /** One gRPC call on a raw HTTP/2 stream: its response headers and trailers. */
  function grpcCall(url: string): Promise<{ headers: http2.IncomingHttpHeaders; trailers: http2.IncomingHttpHeaders }> {
    const message = toBinary(GetProgramRequestSchema, create(GetProgramRequestSchema, { programId: "prg_x" }));
    const frame = Buffer.alloc(5 + message.length);
    frame.writeUInt32BE(message.length, 1);
    frame.set(message, 5);
    return new Promise((resolve, reject) => {
      const session = http2.connect(url);
      session.on("error", reject);
      const req = session.request({
        ":method": "POST",
        ":path": "/ledger.v1.LedgerService/GetProgram",
        "content-type": "application/grpc",
        te: "trailers",
      });
      let headers: http2.IncomingHttpHeaders = {};
      let trailers: http2.IncomingHttpHeaders = {};
      req.on("response", (h) => (headers = h));
      req.on("trailers", (t) => (trailers = t));
      req.on("data", () => {});
      req.on("error", reject);
      req.on("close", () => {
        session.close();
        resolve({ headers, trailers });
      });
      req.end(frame);
    });
  }

  it("arrives as gRPC's spec encodes it, which grpc-js's decodeURI and Connect's client both read whole", async () => {
    const log = pino({ level: "silent" });
    server = await listen({ name: "test", host: "127.0.0.1", port: 0, log, routes, readiness: {} });
    const { headers, trailers } = await grpcCall(server.url);
    const sent = trailers["grpc-message"] ?? headers["grpc-message"];
    expect(trailers["grpc-status"] ?? headers["grpc-status"]).toBe(String(Code.FailedPrecondition));
    expect(sent).toBe(ON_THE_WIRE);
    // What grpc-js does with it.
    expect(decodeURI(sent as string)).toBe(MESSAGE);

    const client = createClient(LedgerService, createGrpcTransport({ baseUrl: server.url }));
    const err = await client.getProgram({ programId: "prg_x" }).catch((e: unknown) => ConnectError.from(e));
    expect(err).toMatchObject({ code: Code.FailedPrecondition, rawMessage: MESSAGE });
  });
});
