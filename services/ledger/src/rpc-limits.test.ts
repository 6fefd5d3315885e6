import * as http from "node:http";
import { Code, ConnectError, createClient, type CallOptions } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ACCOUNT_HEADER, errorCodeOf } from "@ledger/common";
import { startStack, TEST_SERVICE_TOKEN, type Stack } from "@ledger/e2e";
import { HoldService } from "@ledger/proto/hold/v1/hold_pb.js";
import { IdentityService } from "@ledger/proto/ledger/v1/identity_pb.js";
import { LedgerService } from "@ledger/proto/ledger/v1/ledger_pb.js";
import { NotificationService } from "@ledger/proto/notification/v1/notification_pb.js";

// What every RPC port refuses before it looks at who is calling: bodies over RPC_BODY_LIMIT_BYTES,
// and callers over their request budget (the same token bucket as the gateway's).

const LIMIT = 4 * 1024 * 1024;
const HUGE = 50 * 1024 * 1024;

let stack: Stack;
beforeAll(async () => {
  stack = await startStack({ notification: {} });
});
afterAll(async () => stack?.close());

const ports = () => ({
  ledger: `${stack.ledgerUrl}/ledger.v1.LedgerService/CreateEntity`,
  hold: `${stack.hold!.server.url}/hold.v1.HoldService/CreateHold`,
  notification: `${stack.notification!.server.url}/notification.v1.NotificationService/CreateEndpoint`,
});

/**
 * POSTs `HUGE` bytes of JSON-ish junk without an API key, in 64 KiB writes, and stops sending as
 * soon as the server answers or cuts the connection. Says what came back and how much was sent.
 */
function pushHuge(url: string, declareLength: boolean): Promise<{ status: number | undefined; body: string; sent: number }> {
  const { hostname, port, pathname } = new URL(url);
  const chunk = Buffer.alloc(64 * 1024, "a");
  return new Promise((resolve) => {
    let sent = 0;
    let done = false;
    const headers: Record<string, string> = { "content-type": "application/json" };
    if (declareLength) headers["content-length"] = String(HUGE);
    const req = http.request({ host: hostname, port, path: pathname, method: "POST", agent: false, headers });
    const finish = (status: number | undefined, body: string) => {
      if (done) return;
      done = true;
      req.destroy();
      resolve({ status, body, sent });
    };
    req.on("response", (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (text: string) => (body += text));
      res.on("end", () => finish(res.statusCode, body));
      res.on("error", () => finish(res.statusCode, body));
    });
    req.on("error", () => finish(undefined, ""));
    const pump = () => {
      while (!done && sent < HUGE) {
        sent += chunk.length;
        if (!req.write(chunk)) return void req.once("drain", pump);
      }
      if (!done) req.end();
    };
    pump();
  });
}

describe("request size on the RPC ports", () => {
  it.each([
    ["with content-length", true],
    ["chunked, without content-length", false],
  ])("an oversized unauthenticated body %s is refused before it is all sent", async (_how, declareLength) => {
    for (const [name, url] of Object.entries(ports())) {
      const res = await pushHuge(url, declareLength);
      expect(res.status, name).toBe(429);
      expect(JSON.parse(res.body), name).toMatchObject({ code: "resource_exhausted" });
      // Answered after at most the limit plus what was in flight, far from the 50 MB sent.
      expect(res.sent, name).toBeLessThan(HUGE / 2);
      // And the port keeps serving.
      expect((await fetch(new URL("/healthz", url))).status, name).toBe(200);
    }
  });

  it("refuses a large message from a Connect client as resource_exhausted, not unauthenticated", async () => {
    const client = createClient(LedgerService, createConnectTransport({ baseUrl: stack.ledgerUrl, httpVersion: "2" }));
    const err = await client.createEntity({ entityName: "x".repeat(LIMIT + 1), entityType: "w" }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConnectError);
    expect((err as ConnectError).code).toBe(Code.ResourceExhausted);
    // Just under the limit is read, and then refused for the missing key.
    const small = await client.createEntity({ entityName: "x".repeat(LIMIT - 1024), entityType: "w" }).catch((e: unknown) => e);
    expect((small as ConnectError).code).toBe(Code.Unauthenticated);
  });
});

describe("request budgets on the RPC ports", () => {
  const BURST = 3;
  let limited: Stack;
  beforeAll(async () => {
    // Almost no refill: a test's calls are all within one burst.
    limited = await startStack({ notification: {}, rpcRateLimit: { rateLimitPerSecond: 0.01, rateLimitBurst: BURST } });
  });
  afterAll(async () => limited?.close());

  const transport = (baseUrl: string) => createConnectTransport({ baseUrl, httpVersion: "2" });
  /** Makes `calls` calls and says how each ended: "ok", or the error's code. */
  async function outcomes(calls: number, call: () => Promise<unknown>): Promise<string[]> {
    const results: string[] = [];
    for (let i = 0; i < calls; i++) {
      results.push(
        await call().then(
          () => "ok",
          (err: unknown) => errorCodeOf(ConnectError.from(err)).code,
        ),
      );
    }
    return results;
  }

  it("limits an API key after its burst on the ledger, hold and notification ports, with retry-after", async () => {
    const { account } = await limited.newAccount("budget");
    const auth: CallOptions = { headers: { authorization: account.api_key } };
    const ledger = createClient(LedgerService, transport(limited.ledgerUrl));
    expect(await outcomes(BURST + 2, () => ledger.listPrograms({}, auth))).toEqual(["ok", "ok", "ok", "rate_limited", "rate_limited"]);
    const err = ConnectError.from(await ledger.listPrograms({}, auth).catch((e: unknown) => e));
    expect(err.code).toBe(Code.ResourceExhausted);
    expect(err.metadata.get("retry-after")).toMatch(/^\d+$/);
    expect(errorCodeOf(err).details).toMatchObject({ retry_after_seconds: expect.any(Number) });

    const hold = createClient(HoldService, transport(limited.hold!.server.url));
    const notification = createClient(NotificationService, transport(limited.notification!.server.url));
    expect(await outcomes(BURST + 1, () => hold.listHolds({}, auth))).toContain("rate_limited");
    expect(await outcomes(BURST + 1, () => notification.listEndpoints({}, auth))).toContain("rate_limited");
  });

  it("counts every spelling of one key against the same budget", async () => {
    const { account } = await limited.newAccount("spellings");
    const ledger = createClient(LedgerService, transport(limited.ledgerUrl));
    const spellings = [
      account.api_key,
      `Bearer ${account.api_key}`,
      `bEaReR   ${account.api_key}`,
      `\u00a0Bearer ${account.api_key}`,
      `Bearer\t${account.api_key}`,
    ];
    const results = [];
    for (const authorization of spellings)
      results.push(...(await outcomes(1, () => ledger.listPrograms({}, { headers: { authorization } }))));
    expect(results).toEqual(["ok", "ok", "ok", "rate_limited", "rate_limited"]);
  });

  it("limits IdentityService/Authenticate by the caller's address", async () => {
    const identity = createClient(IdentityService, transport(limited.ledgerUrl));
    const results = await outcomes(BURST + 2, () => identity.authenticate({ apiKey: `lsk_guess_${Math.random()}` }));
    expect(results.slice(0, BURST)).toEqual(Array(BURST).fill("unauthenticated"));
    expect(results.slice(BURST)).toEqual(["rate_limited", "rate_limited"]);
  });

  it("does not limit the installation's own services (authorization: Service <token>)", async () => {
    const ledger = createClient(LedgerService, transport(limited.ledgerUrl));
    const asService: CallOptions = {
      headers: { authorization: `Service ${TEST_SERVICE_TOKEN}`, [ACCOUNT_HEADER]: limited.account.account_id },
    };
    expect(await outcomes(BURST * 3, () => ledger.listPrograms({}, asService))).toEqual(Array(BURST * 3).fill("ok"));
    // A wrong token is no exemption: it is limited like any caller, by address.
    const forged: CallOptions = { headers: { authorization: "Service not-the-token", [ACCOUNT_HEADER]: limited.account.account_id } };
    expect(await outcomes(BURST * 3, () => ledger.listPrograms({}, forged))).toContain("rate_limited");
  });
});
