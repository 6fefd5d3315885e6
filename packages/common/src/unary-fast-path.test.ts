import * as http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { create, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, createContextValues, type ConnectRouter, type Interceptor } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { CreateTransactionRequestSchema, CreateTransactionResponseSchema, LedgerService } from "@ledger/proto/ledger/v1/ledger_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ErrorDetailSchema } from "@ledger/proto/common/v1/common_pb.js";
import { http2Request } from "@ledger/testing";
import { answeringTransfer, refusingHandlers, untilSignalEnds } from "./rpc-refusals.testing.js";
import { inProcessService } from "./in-process.js";
import { createUnaryFastPath } from "./unary-fast-path.js";

// The fast path must answer every request it takes exactly as connect-node answers it: the same
// status, headers and bytes. Each case goes to both; a request the fast path declines is answered
// 599 by its server here, so a case also shows which path took it.
const READ_MAX_BYTES = 1024;
const DECLINED = 599;

const routes = (router: ConnectRouter) =>
  router.service(LedgerService, {
    createTransaction: answeringTransfer(
      (ctx) => `${ctx.values.get(peerKey) ? "peer" : "no peer"} ${ctx.requestHeader.get("x-request-id") ?? ""}`,
    ),
    ...refusingHandlers,
    // Waits for its signal (the deadline) and answers with the signal's reason.
    listEntities: async (_req, ctx) => {
      await untilSignalEnds(ctx);
      throw ctx.signal.reason;
    },
    // Records why its signal ended, which is after the call.
    getProgram: (req, ctx) => {
      ctx.signal.addEventListener("abort", () => endings.push(`${req.programId}: ${String(ctx.signal.reason)}`));
      return {};
    },
  });
const endings: string[] = [];

const peerKey = { id: Symbol("peer"), defaultValue: false, description: "peer" };
const interceptors: Interceptor[] = [
  (next) => async (req) => {
    if (req.header.get("authorization") !== "key") throw new ConnectError("no key", Code.Unauthenticated);
    const res = await next(req);
    res.header.set("x-interceptor", req.method.name);
    return res;
  },
];
const contextValues = () => createContextValues().set(peerKey, true);

interface Answer {
  status: number;
  headers: Record<string, string>;
  body: string;
}

describe("unary fast path", () => {
  const servers: http2.Http2Server[] = [];
  const sessions = new Set<http2.ServerHttp2Session>();
  let fastUrl = "";
  let connectUrl = "";

  async function serve(server: http2.Http2Server): Promise<string> {
    server.on("session", (s) => sessions.add(s));
    servers.push(server);
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  }

  beforeAll(async () => {
    const fast = createUnaryFastPath({ routes, interceptors, readMaxBytes: READ_MAX_BYTES, contextValues });
    const fastServer = http2.createServer();
    fastServer.on("stream", (stream, headers) => {
      if (fast(stream, headers)) return;
      stream.respond({ ":status": DECLINED });
      stream.end();
    });
    fastUrl = await serve(fastServer);
    connectUrl = await serve(
      http2.createServer(connectNodeAdapter({ routes, interceptors, readMaxBytes: READ_MAX_BYTES, contextValues }) as never),
    );
  });
  afterAll(async () => {
    for (const s of sessions) s.destroy();
    await Promise.all(servers.map((s) => new Promise((resolve) => s.close(resolve))));
  });

  async function send(url: string, headers: http2.OutgoingHttpHeaders, body: Uint8Array): Promise<Answer> {
    const answer = await http2Request(url, headers, body);
    const out: Record<string, string> = {};
    for (const [k, v] of Object.entries(answer.headers)) if (!k.startsWith(":") && k !== "date") out[k] = String(v);
    return { status: answer.status, headers: out, body: answer.body.toString("base64") };
  }

  const path = (method: string) => `/ledger.v1.LedgerService/${method}`;
  const proto = (method: string, extra: http2.OutgoingHttpHeaders = {}): http2.OutgoingHttpHeaders => ({
    ":method": "POST",
    ":path": path(method),
    "content-type": "application/proto",
    "connect-protocol-version": "1",
    authorization: "key",
    ...extra,
  });
  const transfer = toBinary(
    CreateTransactionRequestSchema,
    create(CreateTransactionRequestSchema, {
      form: { case: "transfer", value: { fromEntityId: "ent_a", toEntityId: "ent_b", amount: 5n } },
    }),
  );

  const taken: Array<[string, http2.OutgoingHttpHeaders, Uint8Array]> = [
    ["an answer, with the handler's headers and trailers", proto("CreateTransaction", { "x-request-id": "r1" }), transfer],
    ["an answer with a deadline", proto("CreateTransaction", { "connect-timeout-ms": "30000" }), transfer],
    ["no protocol version header", { ...proto("CreateTransaction"), "connect-protocol-version": undefined }, transfer],
    ["a domain refusal with details", proto("FundEntity"), new Uint8Array()],
    ["an error with metadata", proto("GetEntity"), new Uint8Array()],
    ["a bug in a handler: internal, nothing of it shown", proto("DefundEntity"), new Uint8Array()],
    ["an interceptor's refusal", proto("CreateTransaction", { authorization: "wrong" }), transfer],
    ["a body that is not protobuf", proto("CreateTransaction"), Buffer.from([0x0a, 0xff, 0xff])],
    ["a declared length over the limit", proto("CreateTransaction", { "content-length": "2048" }), new Uint8Array(2048)],
    ["a body over the limit without a declared length", proto("CreateTransaction"), new Uint8Array(4096)],
    ["a declared length longer than the body", proto("CreateTransaction", { "content-length": String(transfer.length + 3) }), transfer],
    ["a bad deadline", proto("CreateTransaction", { "connect-timeout-ms": "soon" }), transfer],
    ["a handler that waits past its deadline", proto("ListEntities", { "connect-timeout-ms": "50" }), new Uint8Array()],
  ];
  for (const [name, headers, body] of taken) {
    it(`answers as connect-node does: ${name}`, async () => {
      const [fast, connect] = await Promise.all([send(fastUrl, headers, body), send(connectUrl, headers, body)]);
      expect(fast.status).not.toBe(DECLINED);
      expect(fast).toEqual(connect);
    });
  }

  it("refuses a binary body that is not the request message as invalid_argument (400), as connect-node now does", async () => {
    const garbage = Buffer.from([0x0a, 0xff, 0xff]);
    const [fast, connect] = await Promise.all([
      send(fastUrl, proto("CreateTransaction"), garbage),
      send(connectUrl, proto("CreateTransaction"), garbage),
    ]);
    for (const answer of [fast, connect]) {
      expect(answer.status).toBe(400);
      expect(JSON.parse(Buffer.from(answer.body, "base64").toString())).toMatchObject({ code: "invalid_argument" });
    }
  });

  it("reads the answer as the protobuf the method returns", async () => {
    const answer = await send(fastUrl, proto("CreateTransaction", { "x-request-id": "r1" }), transfer);
    expect(answer.status).toBe(200);
    expect(answer.headers["x-handler"]).toBe("yes");
    expect(answer.headers["trailer-x-trailer"]).toBe("done");
    expect(answer.headers["x-interceptor"]).toBe("CreateTransaction");
    const expected = toBinary(
      CreateTransactionResponseSchema,
      create(CreateTransactionResponseSchema, { transactionGroup: { transactionGroupId: "tg_ent_a_5", description: "peer r1" } }),
    );
    expect(answer.body).toBe(Buffer.from(expected).toString("base64"));
  });

  it("ends the handler's signal when the call completes, with Connect's reason", async () => {
    const body = (programId: string) => Buffer.from([0x0a, programId.length, ...Buffer.from(programId)]);
    await send(fastUrl, proto("GetProgram"), body("fast"));
    await send(connectUrl, proto("GetProgram"), body("node"));
    await expect.poll(() => endings.length).toBe(2);
    const reason = (prefix: string) => endings.find((e) => e.startsWith(prefix))?.slice(prefix.length);
    expect(reason("fast: ")).toBe(reason("node: "));
    expect(reason("fast: ")).toContain("completed");
  });

  const declined: Array<[string, http2.OutgoingHttpHeaders]> = [
    ["JSON", { ...proto("CreateTransaction"), "content-type": "application/json" }],
    ["a compressed body", proto("CreateTransaction", { "content-encoding": "gzip" })],
    ["another protocol version", proto("CreateTransaction", { "connect-protocol-version": "2" })],
    ["gRPC", { ...proto("CreateTransaction"), "content-type": "application/grpc" }],
    ["GET", { ...proto("GetEntity"), ":method": "GET" }],
    ["an unknown method", proto("NoSuchMethod")],
  ];
  for (const [name, headers] of declined) {
    it(`leaves ${name} to connect-node`, async () => {
      const answer = await send(fastUrl, headers, headers[":method"] === "GET" ? new Uint8Array() : transfer);
      expect(answer.status).toBe(DECLINED);
    });
  }
});

// In one process, callers reach a service through `inProcessService`: its fast transport must give
// callers what Connect's router transport gives them, answers and refusals alike.
describe("in-process unary transport", () => {
  const build = (unaryFastPath: boolean) => {
    const service = inProcessService({ name: "ledger", routes, interceptors, readMaxBytes: READ_MAX_BYTES, unaryFastPath });
    const callerInterceptors: Interceptor[] = [
      (next) => async (req) => {
        req.header.set("x-request-id", "from-caller");
        return next(req);
      },
    ];
    return createClient(LedgerService, service.transport(callerInterceptors));
  };
  const fast = build(true);
  const connect = build(false);
  const options = { headers: { authorization: "key" } };

  async function both(call: (client: typeof fast) => Promise<unknown>) {
    const run = async (client: typeof fast) => {
      try {
        return { message: await call(client) };
      } catch (err) {
        const e = ConnectError.from(err);
        const headers: Record<string, string> = {};
        for (const [k, v] of e.metadata) if (k !== "content-type" && k !== "content-length") headers[k] = v;
        const [detail] = e.findDetails(ErrorDetailSchema);
        return { code: e.code, message: e.rawMessage, detail: detail?.code, headers };
      }
    };
    return [await run(fast), await run(connect)];
  }

  it("answers as the router transport does, with the caller's interceptors and the handler's headers", async () => {
    const seen: Array<Record<string, string | undefined>> = [];
    for (const client of [fast, connect]) {
      const res = await client.createTransaction(
        { form: { case: "transfer", value: { fromEntityId: "ent_a", toEntityId: "ent_b", amount: 5n } } },
        {
          ...options,
          onHeader: (h) => seen.push({ handler: h.get("x-handler") ?? undefined, interceptor: h.get("x-interceptor") ?? undefined }),
          onTrailer: (t) => seen.push({ trailer: t.get("x-trailer") ?? undefined }),
        },
      );
      expect(res.transactionGroup?.transactionGroupId).toBe("tg_ent_a_5");
      expect(res.transactionGroup?.description).toBe("no peer from-caller");
    }
    expect(seen.slice(0, 2)).toEqual(seen.slice(2));
    expect(seen[0]).toEqual({ handler: "yes", interceptor: "CreateTransaction" });
  });

  const refusals: Array<[string, (client: typeof fast) => Promise<unknown>]> = [
    ["a domain refusal with details", (c) => c.fundEntity({ entityId: "ent_a", amount: 1n }, options)],
    ["an error with metadata", (c) => c.getEntity({ entityId: "ent_x" }, options)],
    ["a bug in a handler", (c) => c.defundEntity({ entityId: "ent_a", amount: 1n }, options)],
    ["an interceptor's refusal", (c) => c.getEntity({ entityId: "ent_x" })],
    ["a deadline passed while the handler waits", (c) => c.listEntities({}, { ...options, timeoutMs: 50 })],
    ["a caller's abort", (c) => c.listEntities({}, { ...options, signal: AbortSignal.timeout(50) })],
  ];
  for (const [name, call] of refusals) {
    it(`refuses as the router transport does: ${name}`, async () => {
      const [fastOutcome, connectOutcome] = await both(call);
      expect(fastOutcome).toHaveProperty("code");
      expect(fastOutcome).toEqual(connectOutcome);
    });
  }
});
