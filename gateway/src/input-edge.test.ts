import { connect, type Socket } from "node:net";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { newId } from "@ledger/common";
import { restClient, startHandlers, type ApiResponse, type Handlers } from "@ledger/e2e";

// What the gateway refuses at its edge, before any service is asked: a request without a valid key
// (before its body is read), a body while the process is already reading as many bytes of bodies
// as it allows, duplicate JSON keys and NUL characters. The services' handlers run in memory
// behind it with nothing behind them (startHandlers): a refusal here also reached nothing.

let handlers: Handlers;
// Small limits, so that two bodies in flight are over the budget.
const BODY_LIMIT = 64 * 1024;
const BUDGET = 100 * 1024;

beforeAll(async () => {
  handlers = await startHandlers({ bodyLimitBytes: BODY_LIMIT, batchBodyLimitBytes: BODY_LIMIT, bodyBudgetBytes: BUDGET });
});
afterAll(async () => handlers?.close());

const a = newId("entity");
const b = newId("entity");

function expectError(res: ApiResponse, status: number, code: string, why = "") {
  expect(res.status, `${why} ${JSON.stringify(res.body)}`).toBe(status);
  expect(res.body.status, why).toBe("error");
  expect(res.body.error.code, why).toBe(code);
  expect(handlers.reached.splice(0), why).toEqual([]);
}

const json = { "content-type": "application/json" };

/**
 * A raw HTTP/1.1 request of which only the head (and `start` of the body) is sent; the rest is up
 * to the test. `answer` is the first answer's text, once its head and body are in (or the
 * connection ended), and "" if none came within five seconds.
 */
function openRequest(path: string, headers: Record<string, string>, start = ""): { socket: Socket; answer: Promise<string> } {
  const url = new URL(handlers.restUrl + path);
  const socket = connect(Number(url.port), url.hostname);
  let text = "";
  const answer = new Promise<string>((resolve) => {
    const timer = setTimeout(() => resolve(""), 5_000);
    const done = () => {
      clearTimeout(timer);
      resolve(text);
    };
    socket.on("data", (chunk) => {
      text += chunk.toString("latin1");
      const headEnd = text.indexOf("\r\n\r\n");
      const length = /\r\ncontent-length: (\d+)/i.exec(text);
      if (headEnd >= 0 && length && text.length >= headEnd + 4 + Number(length[1])) done();
    });
    socket.on("error", done);
    socket.on("close", done);
  });
  const head = Object.entries({ host: url.host, ...headers })
    .map(([k, v]) => `${k}: ${v}\r\n`)
    .join("");
  socket.write(`POST ${url.pathname} HTTP/1.1\r\n${head}\r\n${start}`);
  return { socket, answer };
}

describe("a request without a valid API key", () => {
  it("is answered 401 for a broken batch body, whether the key is missing or unknown", async () => {
    for (const key of [undefined, "lsk_not-a-real-key", "Bearer", "two words"]) {
      const res = await restClient(handlers.restUrl, key).request("POST", "/transaction/batch", {
        raw: '{"transactions": [',
        headers: json,
      });
      expectError(res, 401, "unauthenticated", String(key));
    }
    // An unknown query parameter or a bad query value is not looked at either.
    expectError(await restClient(handlers.restUrl, undefined).get("/entities", { sort: "x" }), 401, "unauthenticated");
  });

  it("is answered 401 before its body arrives, and the connection closes", async () => {
    // The head announces a body that never comes: an answer at all means the body was not waited for.
    const { socket, answer } = openRequest("/transaction/batch", { ...json, "content-length": String(BODY_LIMIT - 1) });
    const text = await answer;
    socket.destroy();
    expect(text).toMatch(/^HTTP\/1\.1 401 /);
    expect(text.toLowerCase()).toContain("connection: close");
    expect(text).toContain('"code":"unauthenticated"');
  });
});

describe("the body budget", () => {
  it("answers 503 with Retry-After while other bodies hold it, and takes bodies again once they are read", async () => {
    // One body of 60 KiB is being read (its head and a first byte sent): 40 KiB of the budget are left.
    const size = 60 * 1024;
    const body = JSON.stringify({ entity_name: "x".repeat(size - 50), entity_type: "w" }).padEnd(size, " ");
    const held = openRequest("/entity", { ...json, authorization: handlers.apiKey, "content-length": String(size) }, body.slice(0, 1));
    const second = () => handlers.api.request("POST", "/entity", { raw: body, headers: json });
    let refused: ApiResponse | undefined;
    await vi.waitFor(
      async () => {
        refused = await second();
        expect(refused.status).toBe(503);
      },
      { timeout: 10_000, interval: 50 },
    );
    expectError(refused!, 503, "unavailable");
    expect(refused!.headers.get("retry-after")).toBe("1");
    // A request without a body takes nothing from the budget.
    expectError(await handlers.api.get("/entities", { sort: "x" }), 400, "invalid_request");

    held.socket.write(body.slice(1));
    expect(await held.answer).toMatch(/^HTTP\/1\.1 /);
    // Once the first body is read and answered, the budget is whole again.
    await vi.waitFor(async () => expect((await second()).status).not.toBe(503), { timeout: 10_000, interval: 50 });
    held.socket.destroy();
    handlers.reached.splice(0);
  });
});

describe("duplicate keys in a JSON body", () => {
  const cases: Array<[string, string, string]> = [
    ["at the top", `{"entity_id":"${a}","amount":1,"amount":2}`, "/entity/fund"],
    ["in an object", `{"description":"d","amount":1,"account":{"from":"${a}","to":"${b}","to":"${a}"}}`, "/transaction"],
    ["in metadata, deep down", `{"entity_name":"n","entity_type":"t","metadata":{"a":{"b":[{"c":1,"c":1}]}}}`, "/entity"],
    [
      "in a batch item",
      `{"transactions":[{"description":"d","amount":1,"account":{"from":"${a}","to":"${b}"}},{"description":"d","amount":1,"amount":2,"account":{"from":"${a}","to":"${b}"}}]}`,
      "/transaction/batch",
    ],
    ["spelt two ways", `{"entity_id":"${a}","amount":1,"\\u0061mount":2}`, "/entity/fund"],
  ];

  it.each(cases)("are refused with 400 naming the key: %s", async (_why, raw, path) => {
    const res = await handlers.api.request("POST", path, { raw, headers: json });
    expectError(res, 400, "invalid_request", raw);
    const key = { "/entity/fund": "amount", "/transaction": "to", "/entity": "c", "/transaction/batch": "amount" }[path]!;
    expect(res.body.error.message).toContain(`"${key}"`);
  });

  it("name where the key is given twice", async () => {
    const raw = cases[3]![1];
    const res = await handlers.api.request("POST", "/transaction/batch", { raw, headers: json });
    expect(res.body.error.message).toContain("transactions[1]");
    expect(res.body.error.details).toEqual({ field: "transactions[1].amount" });
  });

  it("are not keys that merely look alike, or the same key in two objects", async () => {
    const raw = `{"description":"d","amount":1,"account":{"from":"${a}","to":"${b}"},"metadata":{"amount":1,"Amount":2,"from":"x:y","a:b":"c:d","a\\"b":1,"a\\\\\\"b":2}}`;
    const res = await handlers.api.request("POST", "/transaction", { raw, headers: json });
    // Past the gateway's checks: the ledger's handler was reached (and had nothing behind it).
    expect(res.status).toBe(500);
    expect(handlers.reached.splice(0).length).toBeGreaterThan(0);
  });
});

describe("NUL characters", () => {
  it("in a query value or name answer 400", async () => {
    expectError(await handlers.api.get("/entity", { entity_id: "\u0000" }), 400, "invalid_request", "value");
    expectError(await handlers.api.get("/entities", { entity_type: "a\u0000b" }), 400, "invalid_request", "value");
    expectError(await handlers.api.get("/holds", { entity_id: a, status: "held", "\u0000": "x" }), 400, "invalid_request", "name");
  });

  it("in any string of a body, keys included, answer 400 naming where", async () => {
    const cases: Array<[string, unknown, string]> = [
      ["/entity", { entity_name: "a\u0000", entity_type: "w" }, "entity_name"],
      ["/entity", { entity_name: "n", entity_type: "\u0000" }, "entity_type"],
      ["/entity", { entity_name: "n", entity_type: "w", metadata: { note: ["ok", "\u0000"] } }, "metadata.note[1]"],
      ["/entity", { entity_name: "n", entity_type: "w", metadata: { "k\u0000": 1 } }, "metadata"],
      ["/program", { program_name: "p\u0000" }, "program_name"],
      [
        "/transaction/batch",
        { transactions: [{ description: "d", amount: 1, account: { from: a, to: b }, idempotency_key: "k\u0000" }] },
        "transactions[0].idempotency_key",
      ],
      ["/hold", { entity_id: a, amount: 1, description: "\u0000" }, "description"],
      ["/webhooks", { url: "https://example.com/hook", name: "\u0000" }, "name"],
    ];
    for (const [path, body, field] of cases) {
      const res = await handlers.api.post(path, body);
      expectError(res, 400, "invalid_request", `${path} ${JSON.stringify(body)}`);
      expect(res.body.error.message).toMatch(/NUL/);
      expect(res.body.error.details?.field, `${path} ${JSON.stringify(body)}`).toBe(field);
    }
  });

  it("in an Idempotency-Key header never get past the HTTP parser", async () => {
    const { socket, answer } = openRequest("/entity", {
      ...json,
      authorization: handlers.apiKey,
      "idempotency-key": "a\u0000b",
      "content-length": "2",
    });
    socket.write("{}");
    const text = await answer;
    socket.destroy();
    expect(text).toMatch(/^HTTP\/1\.1 400 /);
    expect(handlers.reached.splice(0)).toEqual([]);
  });
});
