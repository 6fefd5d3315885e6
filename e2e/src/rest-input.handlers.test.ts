import { describe, expect, it } from "vitest";
import { newId } from "@ledger/common";
import { refusalHandlers, restClient, type ApiResponse } from "./index.js";

// Refusals of bad REST input, through the gateway and each service's own handlers and
// authentication, in memory and with no database behind them (startHandlers): every refusal here
// is decided before anything is read or written, which is also why a refused call changes nothing.
// What needs stored state (unknown ids, business rules, idempotent replays) is in the full-stack
// tests beside each service and the gateway.

// After each test, nothing behind the handlers was reached.
const handlers = refusalHandlers();

const api = () => handlers().api;
const a = newId("entity");
const b = newId("entity");

/** The 31st of the next month that has 30 days, as an ISO 8601 time: a day that does not exist. */
function thirtyFirstOfA30DayMonth(): string {
  const now = new Date();
  for (let ahead = 1; ; ahead++) {
    const month = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + ahead, 1));
    const days = new Date(Date.UTC(month.getUTCFullYear(), month.getUTCMonth() + 1, 0)).getUTCDate();
    if (days === 30) return `${month.toISOString().slice(0, 8)}31T12:00:00Z`;
  }
}

function expectError(res: ApiResponse, status: number, code: string, why = "") {
  expect(res.status, `${why} ${JSON.stringify(res.body)}`).toBe(status);
  expect(res.body.status).toBe("error");
  expect(res.body.error.code, why).toBe(code);
  expect(typeof res.body.error.message).toBe("string");
  expect(JSON.stringify(res.body)).not.toMatch(/select |insert |update |postgres|whsec_|at .*\.ts:\d+/i);
}

describe("the ledger's endpoints", () => {
  const amounts: Array<[string, unknown]> = [
    ["zero", 0],
    ["negative", -5],
    ["float", 10.5],
    ["string", "10"],
    // 2^53, the first integer past Number.MAX_SAFE_INTEGER.
    ["huge", 2 ** 53],
    ["object", { value: 1 }],
    ["null", null],
    ["boolean", true],
  ];

  it.each(amounts)("refuse a %s amount on every money endpoint with 400", async (_name, amount) => {
    const calls = [
      api().post("/entity/fund", { entity_id: a, amount }),
      api().post("/entity/defund", { entity_id: a, amount }),
      api().post("/transaction", { description: "x", amount, status: "posted", account: { from: a, to: b } }),
      api().post("/transaction", {
        description: "x",
        status: "posted",
        entries: [
          { entity_id: a, direction: "debit", amount },
          { entity_id: b, direction: "credit", amount },
        ],
      }),
      api().post("/hold", { entity_id: a, amount }),
    ];
    for (const res of await Promise.all(calls)) expectError(res, 400, "invalid_request");
  });

  it("refuse missing fields, wrong types and unknown fields with 400", async () => {
    const cases: Array<[string, unknown]> = [
      ["/entity", { entity_type: "x" }],
      ["/entity", { entity_name: "x" }],
      ["/entity", { entity_name: 5, entity_type: "x" }],
      ["/entity", { entity_name: "x", entity_type: "x", metadata: [1, 2] }],
      ["/entity", { entity_name: "x", entity_type: "x", currency_code: "usd" }],
      ["/entity", { entity_name: "x", entity_type: "x", colour: "red" }],
      ["/entity", { entity_name: "nul\u0000name", entity_type: "x" }],
      ["/entity", { entity_name: "x", entity_type: "x", metadata: { note: "nul\u0000" } }],
      ["/transaction", { description: "nul\u0000", amount: 10, account: { from: a, to: b } }],
      ["/entity/fund", { amount: 10 }],
      ["/entity/fund", { entity_id: a, ammount: 10 }],
      ["/transaction", { amount: 10, account: { from: a, to: b } }],
      ["/transaction", { description: "x", amount: 10 }],
      ["/transaction", { description: "x", amount: 10, account: { from: a } }],
      ["/transaction", { description: "x", amount: 10, account: { from: a, to: a } }],
      ["/transaction", { description: "x", amount: 10, account: "a->b" }],
      ["/transaction", { description: "x", amount: 10, status: "settled", account: { from: a, to: b } }],
      ["/transaction", { description: "x", entries: [{ entity_id: a, direction: "debit", amount: 10 }] }],
      [
        "/transaction",
        {
          description: "x",
          entries: [
            { entity_id: a, direction: "up", amount: 10 },
            { entity_id: b, direction: "credit", amount: 10 },
          ],
        },
      ],
      ["/transaction", { description: "x", entries: "all" }],
      ["/transaction", { description: "x", amount: 10, account: { from: a, to: b }, entries: [] }],
      ["/transaction/post", {}],
      ["/transaction/post", { transaction_group_id: 12 }],
      ["/program", {}],
      ["/program", { program_name: "x", currency_code: "dollars" }],
    ];
    for (const [path, body] of cases) expectError(await api().post(path, body), 400, "invalid_request", `${path} ${JSON.stringify(body)}`);
  });

  it("refuse malformed JSON, non-object bodies, bad query values and bad cursors with 400", async () => {
    for (const raw of ["{", "not json", "[1,2]", "42", '"text"', "null"]) {
      expectError(
        await api().request("POST", "/entity/fund", { raw, headers: { "content-type": "application/json" } }),
        400,
        "invalid_request",
        raw,
      );
    }
    expectError(await api().get("/entities", { limit: "0" }), 400, "invalid_request");
    expectError(await api().get("/entities", { limit: "101" }), 400, "invalid_request");
    expectError(await api().get("/entities", { limit: "ten" }), 400, "invalid_request");
    expectError(await api().get("/entities", { cursor: "garbage!" }), 400, "invalid_request");
    expectError(await api().get("/entities", { cursor: Buffer.from('{"b":"ent_x"}').toString("base64url") }), 400, "invalid_request");
    expectError(await api().get("/entities", { sort: "asc" }), 400, "invalid_request");
    expectError(await api().get("/transactions", { entity_id: a, status: "done" }), 400, "invalid_request");
    expectError(await api().get("/entity"), 400, "invalid_request");
  });

  it("refuse an empty or oversized Idempotency-Key", async () => {
    expectError(
      await api().post("/entity/fund", { entity_id: a, amount: 1 }, { "idempotency-key": "k".repeat(256) }),
      400,
      "invalid_request",
    );
    expectError(await api().post("/entity/fund", { entity_id: a, amount: 1 }, { "idempotency-key": "" }), 400, "invalid_request");
  });
});

describe("batches", () => {
  it("refuse a malformed batch with 400 before any item is tried", async () => {
    const item = { description: "x", amount: 1, status: "posted", account: { from: a, to: b } };
    const cases: Array<[string, unknown]> = [
      ["not an object", [item]],
      ["transactions missing", { atomic: false }],
      ["transactions not an array", { transactions: item }],
      ["empty", { transactions: [] }],
      ["over 1,000 items", { transactions: Array.from({ length: 1001 }, () => item) }],
      ["an unknown top-level field", { transactions: [item], atomik: true }],
      ["atomic not a boolean", { transactions: [item], atomic: "yes" }],
    ];
    for (const [why, body] of cases) expectError(await api().post("/transaction/batch", body), 400, "invalid_request", why);
  });
});

describe("the hold endpoints", () => {
  it("refuse a bad hold, capture or release with 400", async () => {
    const hold = newId("hold");
    const calls: Array<[string, Record<string, unknown>]> = [
      ["/hold", { entity_id: a, amount: 0 }],
      ["/hold", { entity_id: a, amount: 1.5 }],
      ["/hold", { entity_id: a, amount: 5, expires_at: "tomorrow" }],
      // A day that does not exist, soon enough to be a valid expiry if read (as Date reads it) as the 1st of the next month.
      ["/hold", { entity_id: a, amount: 5, expires_at: thirtyFirstOfA30DayMonth() }],
      ["/hold", { amount: 5 }],
      ["/hold/capture", { hold_id: hold, amount: 0, destination_entity_id: b }],
      ["/hold/capture", { hold_id: hold, amount: 5 }],
      ["/hold/capture", { amount: 5, destination_entity_id: b }],
      ["/hold/release", {}],
    ];
    for (const [path, body] of calls) expectError(await api().post(path, body), 400, "invalid_request", `${path} ${JSON.stringify(body)}`);
  });
});

describe("the gateway", () => {
  it("answers 413 for a body over the limit, 404 for unknown paths, 405 for a wrong method", async () => {
    const big = await api().request("POST", "/entity", {
      raw: JSON.stringify({ entity_name: "x".repeat(70 * 1024), entity_type: "x" }),
      headers: { "content-type": "application/json" },
    });
    expect(big.status).toBe(413);
    expect(big.body).toEqual({
      status: "error",
      error: { code: "payload_too_large", message: expect.stringMatching(/^the request body is larger than \d+ bytes$/) },
    });
    const missing = await api().get("/nothing-here");
    expectError(missing, 404, "not_found");
    expect(missing.body.error).toEqual({ code: "not_found", message: "no endpoint GET /v1/nothing-here" });
    const wrong = await api().request("DELETE", "/entity");
    expect(wrong.status).toBe(405);
    expect(wrong.headers.get("allow")).toContain("POST");
    expect(wrong.body).toEqual({
      status: "error",
      error: { code: "method_not_allowed", message: expect.stringMatching(/^DELETE is not allowed on \/v1\/entity; use /) },
    });
  });

  it("answers 401 without a key or with a wrong one, on every service's paths, and takes a Bearer key", async () => {
    const paths: Array<[string, Record<string, string>]> = [
      ["/programs", {}],
      ["/holds", { entity_id: a }],
      ["/webhooks", {}],
      ["/events", {}],
    ];
    for (const [path, query] of paths) {
      expectError(await restClient(handlers().restUrl, undefined).get(path, query), 401, "unauthenticated", path);
      expectError(await restClient(handlers().restUrl, "lsk_not-a-real-key").get(path, query), 401, "unauthenticated", path);
    }
    // Past authentication with the Bearer form: refused for the amount, not for the key.
    expectError(
      await restClient(handlers().restUrl, `Bearer ${handlers().apiKey}`).post("/entity/fund", { entity_id: a, amount: 0 }),
      400,
      "invalid_request",
    );
  });
});

describe("metadata limits at the REST edge", () => {
  /** `{"k":{"k":...1}}` with `depth` objects, as JSON text (built as text: no recursion anywhere). */
  const nestedText = (depth: number) => '{"k":'.repeat(depth - 1) + '{"k":1' + "}".repeat(depth);

  function expectInvalid(res: ApiResponse, mentions: RegExp) {
    expectError(res, 400, "invalid_request");
    expect(res.body.error.message).toMatch(mentions);
  }

  it("refuses metadata 17, 50 and 5,000 levels deep with 400, naming the limit", async () => {
    for (const depth of [17, 50, 5_000]) {
      const raw = `{"entity_name":"deep","entity_type":"wallet","metadata":${nestedText(depth)}}`;
      expectInvalid(await api().request("POST", "/entity", { raw, headers: { "content-type": "application/json" } }), /16 levels/);
      const txRaw = `{"description":"d","amount":1,"account":{"from":"${a}","to":"${b}"},"metadata":${nestedText(depth)}}`;
      expectInvalid(
        await api().request("POST", "/transaction", { raw: txRaw, headers: { "content-type": "application/json" } }),
        /16 levels/,
      );
    }
  });

  it("refuses arrays nested too deep as well", async () => {
    const raw = `{"entity_name":"deep","entity_type":"wallet","metadata":{"list":${"[".repeat(20_000)}${"]".repeat(20_000)}}}`;
    expectInvalid(await api().request("POST", "/entity", { raw, headers: { "content-type": "application/json" } }), /16 levels/);
  });

  it("refuses metadata over 16 KiB of JSON and keys over 256 characters", async () => {
    expectInvalid(
      await api().post("/entity", { entity_name: "big", entity_type: "wallet", metadata: { note: "x".repeat(16 * 1024) } }),
      /16 KiB/,
    );
    // Size counts UTF-8 bytes: 6,000 three-byte characters are 18,000 bytes.
    expectInvalid(
      await api().post("/entity", { entity_name: "big", entity_type: "wallet", metadata: { note: "€".repeat(6_000) } }),
      /16 KiB/,
    );
    expectInvalid(
      await api().post("/entity", { entity_name: "key", entity_type: "wallet", metadata: { ["k".repeat(257)]: 1 } }),
      /256 characters/,
    );
  });
});

describe("the webhook endpoints", () => {
  const endpoint = newId("endpoint");

  it("refuse a bad destination with 400", async () => {
    for (const body of [
      { url: "http://example.com/hook" },
      { url: "not a url" },
      {},
      { url: "https://user:pw@example.com/" },
      { url: "https://example.com/", event_types: ["transaction.nope"] },
      { url: "https://example.com/", event_types: [] },
      { url: "https://example.com/", event_types: "transaction.created" },
      { url: "https://example.com/", event_types: [1] },
      { url: "https://example.com/", name: 5 },
      { url: "https://example.com/", secret: "whsec_mine" },
    ]) {
      expectError(await api().post("/webhooks", body), 400, "invalid_request", JSON.stringify(body));
    }
    expectError(
      await api().request("POST", "/webhooks", { raw: "{", headers: { "content-type": "application/json" } }),
      400,
      "invalid_request",
    );
  });

  it("refuse bad changes, rolls, pages and ids with 400", async () => {
    const calls: Array<[string, string, Record<string, unknown>]> = [
      ["PUT", "/webhooks", { endpoint_id: endpoint, enabled: "no" }],
      ["PUT", "/webhooks", { endpoint_id: endpoint, url: "ftp://x" }],
      ["PUT", "/webhooks", { url: "https://example.com/" }],
      ["POST", "/webhooks/roll", { endpoint_id: endpoint, expire_previous_in_seconds: -1 }],
      ["POST", "/webhooks/roll", { endpoint_id: endpoint, expire_previous_in_seconds: 1.5 }],
      ["GET", "/webhooks", { limit: "0" }],
      ["GET", "/webhooks", { cursor: "garbage!" }],
      ["GET", "/events", { limit: "101" }],
      ["GET", "/webhook", {}],
      ["DELETE", "/webhooks", {}],
    ];
    for (const [method, path, input] of calls) {
      const res =
        method === "GET" || method === "DELETE"
          ? await api().request(method, path, { query: input as Record<string, string> })
          : await api().request(method, path, { body: input });
      expectError(res, 400, "invalid_request", `${method} ${path} ${JSON.stringify(input)}`);
    }
  });

  it("refuse a max_concurrency other than 1 to 256, naming the field", async () => {
    for (const bad of [0, -1, 257, 1.5, "4", true, 2 ** 40]) {
      expectError(
        await api().post("/webhooks", { url: "https://example.com/hook", max_concurrency: bad }),
        400,
        "invalid_request",
        String(bad),
      );
      const res = await api().put("/webhooks", { endpoint_id: endpoint, max_concurrency: bad });
      expectError(res, 400, "invalid_request", String(bad));
      expect(res.body.error.details).toMatchObject({ field: "max_concurrency" });
    }
  });
});
