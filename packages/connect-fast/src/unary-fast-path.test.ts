import * as http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { create, toBinary } from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  createClient,
  createContextValues,
  createRouterTransport,
  type ConnectRouter,
  type Interceptor,
} from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { ErrorDetailSchema } from "@ledger/proto/common/v1/common_pb.js";
import { CreateTransactionRequestSchema, CreateTransactionResponseSchema, LedgerService } from "@ledger/proto/ledger/v1/ledger_pb.js";
import { http2Request } from "@ledger/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { inProcessService } from "./in-process.js";
import { servePort, type TestPort } from "./port.testing.js";
import { answeringTransfer, refusingHandlers, untilSignalEnds } from "./rpc-refusals.testing.js";
import { createUnaryFastPath } from "./unary-fast-path.js";

// A service's port must answer every request exactly as connect-node answers it: the same status,
// headers and bytes, whether the fast path takes the request or leaves it. Each case goes to a port
// as the services build theirs and to connect-node alone, twice: with the fast path on, where the
// requests it takes are counted, and off (RPC_UNARY_FAST_PATH=false), where connect-node serves all.
const READ_MAX_BYTES = 1024;
const SETTINGS = [
  { name: "on", unaryFastPath: true },
  { name: "off", unaryFastPath: false },
];

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

describe.each(SETTINGS)("a service's port, fast path $name", ({ unaryFastPath }) => {
  const servers: http2.Http2Server[] = [];
  const sessions = new Set<http2.ServerHttp2Session>();
  let port: TestPort;
  let connectUrl = "";

  beforeAll(async () => {
    port = await servePort({ routes, interceptors, readMaxBytes: READ_MAX_BYTES, contextValues, unaryFastPath });
    const server = http2.createServer(connectNodeAdapter({ routes, interceptors, readMaxBytes: READ_MAX_BYTES, contextValues }) as never);
    server.on("session", (s) => sessions.add(s));
    servers.push(server);
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    connectUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    await port.close();
    for (const s of sessions) s.destroy();
    await Promise.all(servers.map((s) => new Promise((resolve) => s.close(resolve))));
  });

  it(unaryFastPath ? "has a fast path" : "has none: connect-node serves every request", () => {
    const fast = createUnaryFastPath({ routes, interceptors, readMaxBytes: READ_MAX_BYTES, contextValues, unaryFastPath });
    expect(fast !== undefined).toBe(unaryFastPath);
  });

  async function send(url: string, headers: http2.OutgoingHttpHeaders, body: Uint8Array): Promise<Answer> {
    const answer = await http2Request(url, headers, body);
    const out: Record<string, string> = {};
    for (const [k, v] of Object.entries(answer.headers)) if (!k.startsWith(":") && k !== "date") out[k] = String(v);
    return { status: answer.status, headers: out, body: answer.body.toString("base64") };
  }

  /** The port's answer and connect-node's, and whether the fast path took the request. */
  async function both(headers: http2.OutgoingHttpHeaders, body: Uint8Array): Promise<{ port: Answer; connect: Answer; fast: boolean }> {
    const before = port.fastCalls;
    const [ours, connect] = await Promise.all([send(port.url, headers, body), send(connectUrl, headers, body)]);
    return { port: ours, connect, fast: port.fastCalls > before };
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
      const answers = await both(headers, body);
      expect(answers.fast).toBe(unaryFastPath);
      expect(answers.port).toEqual(answers.connect);
    });
  }

  it("refuses a binary body that is not the request message as connect-node does: internal (500), Connect's code", async () => {
    const answers = await both(proto("CreateTransaction"), Buffer.from([0x0a, 0xff, 0xff]));
    expect(answers.port).toEqual(answers.connect);
    expect(answers.port.status).toBe(500);
    expect(JSON.parse(Buffer.from(answers.port.body, "base64").toString())).toMatchObject({ code: "internal" });
  });

  it("reads the answer as the protobuf the method returns", async () => {
    const answer = await send(port.url, proto("CreateTransaction", { "x-request-id": "r1" }), transfer);
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
    endings.length = 0;
    const body = (programId: string) => Buffer.from([0x0a, programId.length, ...Buffer.from(programId)]);
    await send(port.url, proto("GetProgram"), body("port"));
    await send(connectUrl, proto("GetProgram"), body("node"));
    await expect.poll(() => endings.length).toBe(2);
    const reason = (prefix: string) => endings.find((e) => e.startsWith(prefix))?.slice(prefix.length);
    expect(reason("port: ")).toBe(reason("node: "));
    expect(reason("port: ")).toContain("AbortError");
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
      const answers = await both(headers, headers[":method"] === "GET" ? new Uint8Array() : transfer);
      expect(answers.fast).toBe(false);
      expect(answers.port).toEqual(answers.connect);
    });
  }
});

// In one process, callers reach a service through `inProcessService`: what they get must be what
// Connect's own router transport gives them, answers and refusals alike, with the fast path on and
// off (then the service's transport is that router transport).
describe.each(SETTINGS)("in-process transport, fast path $name", ({ unaryFastPath }) => {
  const callerInterceptors: Interceptor[] = [
    (next) => async (req) => {
      req.header.set("x-request-id", "from-caller");
      return next(req);
    },
  ];
  const service = inProcessService({ name: "ledger", routes, interceptors, readMaxBytes: READ_MAX_BYTES, unaryFastPath });
  const ours = createClient(LedgerService, service.transport(callerInterceptors));
  const connect = createClient(
    LedgerService,
    createRouterTransport(routes, {
      router: { interceptors, readMaxBytes: READ_MAX_BYTES },
      transport: { baseUrl: "http://ledger.in-process", interceptors: callerInterceptors },
    }),
  );
  const options = { headers: { authorization: "key" } };
  async function both(call: (client: typeof ours) => Promise<unknown>) {
    const run = async (client: typeof ours) => {
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
    return [await run(ours), await run(connect)];
  }

  it("answers as the router transport does, with the caller's interceptors and the handler's headers", async () => {
    const seen: Array<Record<string, string | undefined>> = [];
    for (const client of [ours, connect]) {
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

  const refusals: Array<[string, (client: typeof ours) => Promise<unknown>]> = [
    ["a domain refusal with details", (c) => c.fundEntity({ entityId: "ent_a", amount: 1n }, options)],
    ["an error with metadata", (c) => c.getEntity({ entityId: "ent_x" }, options)],
    ["a bug in a handler", (c) => c.defundEntity({ entityId: "ent_a", amount: 1n }, options)],
    ["an interceptor's refusal", (c) => c.getEntity({ entityId: "ent_x" })],
    ["a deadline passed while the handler waits", (c) => c.listEntities({}, { ...options, timeoutMs: 50 })],
    ["a caller's abort", (c) => c.listEntities({}, { ...options, signal: AbortSignal.timeout(50) })],
  ];
  for (const [name, call] of refusals) {
    it(`refuses as the router transport does: ${name}`, async () => {
      const [ourOutcome, connectOutcome] = await both(call);
      expect(ourOutcome).toHaveProperty("code");
      expect(ourOutcome).toEqual(connectOutcome);
    });
  }
});
