import * as http2 from "node:http2";
import * as net from "node:net";
import { create, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, type ConnectRouter, type Interceptor, type Transport } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { ErrorDetailSchema } from "@ledger/proto/common/v1/common_pb.js";
import { Health, HealthCheckResponse_ServingStatus } from "@ledger/proto/grpc/health/v1/health_pb.js";
import { GetEntityResponseSchema, LedgerService } from "@ledger/proto/ledger/v1/ledger_pb.js";
import { startHttp2Server } from "@ledger/testing";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { createHttp2Transport } from "./http2-transport.js";
import { servePort, type TestPort } from "./port.testing.js";
import { answeringTransfer, refusingHandlers, untilSignalEnds } from "./rpc-refusals.testing.js";

// The gateway and the hold service call services at a URL through `createHttp2Transport`; what a
// caller sees must be what Connect's own transport gives it: answers, headers, trailers, refusals,
// deadlines, cancellations, and failures of the connection. Each case goes through both, with the
// fast path on (the lean client) and off (RPC_UNARY_FAST_PATH=false: Connect's transport itself).
const SETTINGS = [
  { name: "on", unaryFastPath: true },
  { name: "off", unaryFastPath: false },
];

const endings: string[] = [];

const routes = (router: ConnectRouter) =>
  router
    .service(LedgerService, {
      createTransaction: answeringTransfer(
        (ctx) => `${ctx.requestHeader.get("x-request-id") ?? ""} ${ctx.requestHeader.get("connect-timeout-ms") ?? "no deadline"}`,
      ),
      ...refusingHandlers,
      // Waits until its signal ends (the caller's deadline, or the caller going away), records why, and answers.
      listEntities: async (req, ctx) => {
        await untilSignalEnds(ctx);
        endings.push(`${req.programId}: ${ConnectError.from(ctx.signal.reason).code}`);
        return {};
      },
    })
    .service(Health, {
      check: () => ({ status: HealthCheckResponse_ServingStatus.SERVING }),
      async *watch() {
        yield { status: HealthCheckResponse_ServingStatus.SERVING };
      },
    });

const interceptors: Interceptor[] = [
  (next) => async (req) => {
    if (req.header.get("authorization") !== "key") throw new ConnectError("no key", Code.Unauthenticated);
    return next(req);
  },
];

// The caller's own interceptor, as the gateway's tracing is.
const callerInterceptors: Interceptor[] = [
  (next) => async (req) => {
    req.header.set("x-request-id", "from-caller");
    const res = await next(req);
    res.header.set("x-seen-by-caller", req.method.name);
    return res;
  },
];

const READ_MAX_BYTES = 1024 * 1024;

/** A service's port with the fast path as `unaryFastPath` says. */
const service = (unaryFastPath: boolean, idleTimeoutMs?: number) =>
  servePort({ routes, interceptors, readMaxBytes: READ_MAX_BYTES, unaryFastPath, ...(idleTimeoutMs ? { idleTimeoutMs } : {}) });

/** The transport under test: lean with the fast path on, Connect's own with it off. */
function ours(unaryFastPath: boolean | undefined, baseUrl: string, readMaxBytes = READ_MAX_BYTES): Transport {
  return createHttp2Transport({ baseUrl, interceptors: callerInterceptors, pingIntervalMs: 30_000, readMaxBytes, unaryFastPath });
}

function connect(baseUrl: string, readMaxBytes = READ_MAX_BYTES): Transport {
  return createConnectTransport({
    baseUrl,
    httpVersion: "2",
    useBinaryFormat: true,
    interceptors: callerInterceptors,
    acceptCompression: [],
    readMaxBytes,
  });
}

interface Outcome {
  code?: Code;
  message?: string;
  detail?: string | undefined;
  metadata?: Record<string, string>;
  answer?: unknown;
}

/** What a caller sees of a call: its answer, or its refusal's code, message, detail and metadata. */
async function outcome(call: () => Promise<unknown>): Promise<Outcome> {
  try {
    return { answer: await call() };
  } catch (err) {
    const e = ConnectError.from(err);
    const metadata: Record<string, string> = {};
    for (const [k, v] of e.metadata) if (k !== "date" && k !== "content-length") metadata[k] = v;
    const [detail] = e.findDetails(ErrorDetailSchema);
    return { code: e.code, message: e.rawMessage, detail: detail?.code, metadata };
  }
}

/** A plain HTTP/2 server that reads each request and answers it with `answer`, for peers that do not speak Connect. */
const rawServer = (answer: (stream: http2.ServerHttp2Stream) => void) =>
  startHttp2Server((stream) => {
    stream.resume();
    answer(stream);
  });

describe.each(SETTINGS)("HTTP/2 unary transport, fast path $name", ({ unaryFastPath }) => {
  let server: TestPort;
  let ourClient: ReturnType<typeof createClient<typeof LedgerService>>;
  let connectClient: ReturnType<typeof createClient<typeof LedgerService>>;
  const options = { headers: { authorization: "key" } };

  beforeAll(async () => {
    server = await service(unaryFastPath);
    ourClient = createClient(LedgerService, ours(unaryFastPath, server.url));
    connectClient = createClient(LedgerService, connect(server.url));
  });
  afterAll(async () => {
    await server.close();
  });

  async function both(call: (client: typeof ourClient) => Promise<unknown>): Promise<[Outcome, Outcome]> {
    return [await outcome(() => call(ourClient)), await outcome(() => call(connectClient))];
  }

  it("answers as Connect's transport does, with the handler's headers and trailers and the caller's interceptors", async () => {
    const seen: Array<Record<string, string | null>> = [];
    for (const client of [ourClient, connectClient]) {
      const res = await client.createTransaction(
        { form: { case: "transfer", value: { fromEntityId: "ent_a", toEntityId: "ent_b", amount: 5n } } },
        {
          ...options,
          timeoutMs: 30_000,
          onHeader: (h) =>
            seen.push({ handler: h.get("x-handler"), caller: h.get("x-seen-by-caller"), trailer: h.get("trailer-x-trailer") }),
          onTrailer: (t) => seen.push({ trailer: t.get("x-trailer") }),
        },
      );
      expect(res.transactionGroup?.transactionGroupId).toBe("tg_ent_a_5");
      expect(res.transactionGroup?.description).toBe("from-caller 30000");
    }
    expect(seen[0]).toEqual({ handler: "yes", caller: "CreateTransaction", trailer: null });
    expect(seen[1]).toEqual({ trailer: "done" });
    expect(seen.slice(0, 2)).toEqual(seen.slice(2));
  });

  it("sends no deadline when the caller gives none, or one of zero", async () => {
    for (const timeoutMs of [undefined, 0]) {
      const [a, b] = await both((c) =>
        c.createTransaction({ form: { case: "transfer", value: { fromEntityId: "e", amount: 1n } } }, { ...options, timeoutMs }),
      );
      expect((a.answer as { transactionGroup: { description: string } }).transactionGroup.description).toBe("from-caller no deadline");
      expect(a).toEqual(b);
    }
  });

  const refusals: Array<[string, (client: typeof ourClient) => Promise<unknown>]> = [
    ["a domain refusal with details", (c) => c.fundEntity({ entityId: "ent_a", amount: 1n }, options)],
    ["an error with metadata", (c) => c.getEntity({ entityId: "ent_x" }, options)],
    ["a bug in a handler", (c) => c.defundEntity({ entityId: "ent_a", amount: 1n }, options)],
    ["the service's interceptor refusing", (c) => c.getEntity({ entityId: "ent_x" })],
    ["a deadline passed while the handler waits", (c) => c.listEntities({ programId: "deadline" }, { ...options, timeoutMs: 50 })],
    ["a caller's abort", (c) => c.listEntities({ programId: "abort" }, { ...options, signal: AbortSignal.timeout(50) })],
    ["a signal aborted before the call", (c) => c.listEntities({}, { ...options, signal: AbortSignal.abort("before") })],
  ];
  for (const [name, call] of refusals) {
    it(`refuses as Connect's transport does: ${name}`, async () => {
      const [ourOutcome, connectOutcome] = await both(call);
      expect(ourOutcome.code).toBeDefined();
      expect(ourOutcome).toEqual(connectOutcome);
    });
  }

  it("resets the stream when the caller ends the call, so the handler's signal ends too", async () => {
    endings.length = 0;
    const aborted = (client: typeof ourClient, programId: string) =>
      outcome(() => client.listEntities({ programId }, { ...options, signal: AbortSignal.timeout(50) }));
    expect((await aborted(ourClient, "ours")).code).toBe(Code.Canceled);
    expect((await aborted(connectClient, "connect")).code).toBe(Code.Canceled);
    // Well before the handler's own 5 s: the service heard each reset as the client going away.
    const heard = () => endings.filter((e) => e.startsWith("ours:") || e.startsWith("connect:")).sort();
    await expect.poll(heard, { timeout: 1_000 }).toEqual([`connect: ${Code.Canceled}`, `ours: ${Code.Canceled}`]);
  });

  it("carries many calls at once over its connection", async () => {
    const answers = await Promise.all(
      Array.from({ length: 300 }, (_, i) =>
        ourClient.createTransaction({ form: { case: "transfer", value: { fromEntityId: "e", amount: BigInt(i) } } }, options),
      ),
    );
    expect(answers.map((a) => a.transactionGroup?.transactionGroupId)).toEqual(answers.map((_, i) => `tg_e_${i}`));
  });

  it("calls again on a new connection after the service closed the idle one", async () => {
    const idleServer = await service(unaryFastPath, 200);
    try {
      for (const transport of [ours(unaryFastPath, idleServer.url), connect(idleServer.url)]) {
        const client = createClient(LedgerService, transport);
        const call = () => client.createTransaction({ form: { case: "transfer", value: { fromEntityId: "e", amount: 7n } } }, options);
        expect((await call()).transactionGroup?.transactionGroupId).toBe("tg_e_7");
        await new Promise((resolve) => setTimeout(resolve, 500));
        expect((await call()).transactionGroup?.transactionGroupId).toBe("tg_e_7");
      }
    } finally {
      await idleServer.close();
    }
  });

  it("passes streaming calls to Connect's transport on the same connection", async () => {
    const health = createClient(Health, ours(unaryFastPath, server.url));
    for await (const status of health.watch({ service: "" }, { ...options, signal: AbortSignal.timeout(2_000) })) {
      expect(status.status).toBe(HealthCheckResponse_ServingStatus.SERVING);
      break;
    }
  });
});

describe.each(SETTINGS)("HTTP/2 unary transport against peers that fail, fast path $name", ({ unaryFastPath }) => {
  const closers: Array<() => Promise<void>> = [];
  afterAll(async () => {
    for (const close of closers) await close();
  });

  async function bothAgainst(answer: (stream: http2.ServerHttp2Stream) => void, readMaxBytes?: number): Promise<[Outcome, Outcome]> {
    const peer = await rawServer(answer);
    closers.push(peer.close);
    const call = (t: Transport) => () => createClient(LedgerService, t).getEntity({ entityId: "ent_a" }, { timeoutMs: 5_000 });
    return [await outcome(call(ours(unaryFastPath, peer.url, readMaxBytes))), await outcome(call(connect(peer.url, readMaxBytes)))];
  }

  const peers: Array<[string, (stream: http2.ServerHttp2Stream) => void, Code]> = [
    [
      "a proxy's 502 with a text body",
      (s) => {
        s.respond({ ":status": 502, "content-type": "text/plain" });
        s.end("bad gateway");
      },
      Code.Unavailable,
    ],
    [
      "a 503 with a JSON body that is no Connect error",
      (s) => {
        s.respond({ ":status": 503, "content-type": "application/json" });
        s.end('{"oops":true}');
      },
      Code.Unavailable,
    ],
    [
      "a 200 of another content type",
      (s) => {
        s.respond({ ":status": 200, "content-type": "text/html" });
        s.end("<html>");
      },
      Code.Unknown,
    ],
    [
      "a compressed answer it did not ask for",
      (s) => {
        s.respond({ ":status": 200, "content-type": "application/proto", "content-encoding": "gzip" });
        s.end(Buffer.from([1, 2, 3]));
      },
      Code.Internal,
    ],
    [
      "bytes that are not the answer's message",
      (s) => {
        s.respond({ ":status": 200, "content-type": "application/proto" });
        s.end(Buffer.from([0xff, 0xff, 0xff]));
      },
      Code.Internal,
    ],
    ["a stream reset with an internal error", (s) => s.close(http2.constants.NGHTTP2_INTERNAL_ERROR), Code.Internal],
  ];
  for (const [name, answer, code] of peers) {
    it(`fails as Connect's transport does: ${name}`, async () => {
      const [ourOutcome, connectOutcome] = await bothAgainst(answer);
      expect(ourOutcome.code).toBe(code);
      expect(ourOutcome.code).toBe(connectOutcome.code);
    });
  }

  // Connect's own transport says internal here: node emits the stream's error before its close,
  // and Connect's client maps the error, not the reset code it maps to unavailable on close. A
  // refused stream was never processed (a service going down, too many streams), so it is worth
  // another try, which unavailable tells the caller (the gateway answers 503). Off, the transport
  // is Connect's, and says what Connect says.
  it(`is ${unaryFastPath ? "unavailable" : "internal, as Connect's transport is,"} when the service refuses the stream`, async () => {
    const [ourOutcome, connectOutcome] = await bothAgainst((s) => s.close(http2.constants.NGHTTP2_REFUSED_STREAM));
    expect(ourOutcome.code).toBe(unaryFastPath ? Code.Unavailable : Code.Internal);
    expect(connectOutcome.code).toBe(Code.Internal);
  });

  it("refuses an answer larger than its limit with resource_exhausted, as Connect's transport does", async () => {
    const big = toBinary(GetEntityResponseSchema, create(GetEntityResponseSchema, { entity: { entityId: "x".repeat(4096) } }));
    const [ourOutcome, connectOutcome] = await bothAgainst((s) => {
      s.respond({ ":status": 200, "content-type": "application/proto" });
      s.end(big);
    }, 1024);
    expect(ourOutcome.code).toBe(Code.ResourceExhausted);
    expect(connectOutcome.code).toBe(Code.ResourceExhausted);
  });

  it("is unavailable where nothing listens, as Connect's transport is", async () => {
    const peer = await rawServer(() => {});
    await peer.close();
    const call = (t: Transport) => () => createClient(LedgerService, t).getEntity({ entityId: "ent_a" });
    const [a, b] = [await outcome(call(ours(unaryFastPath, peer.url))), await outcome(call(connect(peer.url)))];
    expect(a.code).toBe(Code.Unavailable);
    expect(b.code).toBe(Code.Unavailable);
  });

  // A service closes an idle connection (GOAWAY) just as a call sets out on it: the service never
  // saw the call's stream, which the caller's HTTP/2 ends as refused. The lean client sends the call
  // again, on a new connection, instead of failing unavailable; Connect's transport (off) does not.
  it.runIf(unaryFastPath)("sends a call again on a new connection when the service's idle close crossed it", async () => {
    const idle = await service(unaryFastPath, 300);
    // Between the caller and the service: once `holding`, what the caller sends waits until the
    // service sends something (its GOAWAY), so the call reaches the service after its idle close.
    let holding = false;
    let connections = 0;
    const proxy = net.createServer((caller) => {
      connections++;
      const upstream = net.connect(idle.port, "127.0.0.1");
      const held: Buffer[] = [];
      caller.on("data", (chunk: Buffer) => (holding ? held.push(chunk) : upstream.write(chunk)));
      upstream.on("data", (chunk: Buffer) => {
        holding = false;
        for (const chunk of held.splice(0)) upstream.write(chunk);
        caller.write(chunk);
      });
      for (const [a, b] of [
        [caller, upstream],
        [upstream, caller],
      ] as const) {
        a.on("error", () => {});
        a.on("close", () => b.destroy());
      }
    });
    await new Promise<void>((resolve) => proxy.listen(0, "127.0.0.1", resolve));
    closers.push(async () => {
      proxy.close();
      await idle.close();
    });
    const client = createClient(LedgerService, ours(unaryFastPath, `http://127.0.0.1:${(proxy.address() as net.AddressInfo).port}`));
    const call = () =>
      client.createTransaction(
        { form: { case: "transfer", value: { fromEntityId: "e", amount: 9n } } },
        { headers: { authorization: "key" } },
      );
    expect((await call()).transactionGroup?.transactionGroupId).toBe("tg_e_9");
    await new Promise((resolve) => setTimeout(resolve, 100));
    holding = true;
    expect((await call()).transactionGroup?.transactionGroupId).toBe("tg_e_9");
    expect(connections).toBe(2);
  });

  // node closes the streams of a lost connection with CANCEL, which Connect's transport reports as
  // canceled; no caller canceled anything, and the call is worth another try: the lean client says
  // unavailable (the gateway answers 503).
  it("fails the calls in flight when the connection goes, and connects again for the next", async () => {
    let hang = true;
    const peer = await rawServer((stream) => {
      if (hang) return;
      stream.respond({ ":status": 200, "content-type": "application/proto" });
      stream.end(toBinary(GetEntityResponseSchema, create(GetEntityResponseSchema, { entity: { entityId: "ent_back" } })));
    });
    closers.push(peer.close);
    const client = createClient(LedgerService, ours(unaryFastPath, peer.url));
    const inFlight = outcome(() => client.getEntity({ entityId: "ent_a" }, { timeoutMs: 5_000 }));
    await expect.poll(() => peer.sessions.size).toBe(1);
    await new Promise((resolve) => setTimeout(resolve, 50));
    for (const s of peer.sessions) s.destroy();
    const failed = await inFlight;
    expect(failed.code).toBe(unaryFastPath ? Code.Unavailable : Code.Canceled);
    hang = false;
    const again = await client.getEntity({ entityId: "ent_a" }, { timeoutMs: 5_000 });
    expect(again.entity?.entityId).toBe("ent_back");
  });
});

// Unset, the setting is RPC_UNARY_FAST_PATH's: false gives Connect's transport itself, which says
// internal where the lean client says unavailable (a refused stream, above).
describe("HTTP/2 unary transport and RPC_UNARY_FAST_PATH", () => {
  const saved = process.env["RPC_UNARY_FAST_PATH"];
  afterEach(() => {
    if (saved === undefined) delete process.env["RPC_UNARY_FAST_PATH"];
    else process.env["RPC_UNARY_FAST_PATH"] = saved;
  });

  for (const [value, code] of [
    [undefined, Code.Unavailable],
    ["true", Code.Unavailable],
    ["false", Code.Internal],
  ] as const) {
    it(`${value === undefined ? "unset" : `set to ${value}`}, a refused stream is ${Code[code]}`, async () => {
      if (value === undefined) delete process.env["RPC_UNARY_FAST_PATH"];
      else process.env["RPC_UNARY_FAST_PATH"] = value;
      const peer = await rawServer((s) => s.close(http2.constants.NGHTTP2_REFUSED_STREAM));
      try {
        const refused = await outcome(() =>
          createClient(LedgerService, ours(undefined, peer.url)).getEntity({ entityId: "ent_a" }, { timeoutMs: 5_000 }),
        );
        expect(refused.code).toBe(code);
      } finally {
        await peer.close();
      }
    });
  }
});
