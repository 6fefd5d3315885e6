import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { LedgerService } from "@ledger/proto/ledger/v1/ledger_pb.js";
import { ReservationService } from "@ledger/proto/ledger/v1/reservation_pb.js";
import { startStack, TEST_SERVICE_TOKEN, type Stack } from "@ledger/e2e";
import { afterAll, beforeAll, expect, it } from "vitest";

// The wiring `npm start` uses: the gateway and the services call each other in memory. With every
// service's port closed, REST still works end to end (so no call went through a socket), and the
// called service's interceptors (authentication, internal methods, service token, rate limit,
// request id) apply to in-memory calls exactly as to calls arriving on its port.

let stack: Stack;

beforeAll(async () => {
  stack = await startStack({ wiring: "memory", notification: {}, rpcRateLimit: { rateLimitPerSecond: 0.01, rateLimitBurst: 20 } });
  // Closing a port stops it accepting and drains it; the services themselves keep running.
  await stack.ledger.server.close();
  await stack.hold!.server.close();
  await stack.notification!.server.close();
});
afterAll(async () => stack?.close());

it("serves REST with every service port closed: ledger, hold (which calls the ledger) and notification (which asks the ledger about keys)", async () => {
  const { api } = await stack.newAccount("in memory");
  const alice = (await api.post("/entity", { entity_name: "Alice", entity_type: "customer" })).body.entity.entity_id as string;
  const bob = (await api.post("/entity", { entity_name: "Bob", entity_type: "customer" })).body.entity.entity_id as string;
  expect((await api.post("/entity/fund", { entity_id: alice, amount: 1_000 })).status).toBe(200);
  const transfer = await api.post("/transaction", { description: "t", status: "posted", amount: 100, account: { from: alice, to: bob } });
  expect(transfer.status, JSON.stringify(transfer.body)).toBe(200);
  const hold = await api.post("/hold", { entity_id: alice, amount: 200 });
  expect(hold.status, JSON.stringify(hold.body)).toBe(200);
  expect((await api.get("/entity", { entity_id: alice })).body.entity.balances).toMatchObject({ posted: 900, held: 200, available: 700 });
  const webhook = await api.post("/webhooks", { url: "https://127.0.0.1:9/hook", event_types: ["transaction.created"] });
  expect(webhook.status, JSON.stringify(webhook.body)).toBe(200);
  // The request id the gateway gave the call is the one the services saw and echo.
  expect(transfer.headers.get("x-request-id")).toMatch(/^[\w.:-]+$/);
});

it("refuses a wrong API key in memory as on the port: 401 through REST, on every service", async () => {
  const res = await fetch(`${stack.restUrl}/entities`, { headers: { authorization: "lsk_not_a_key" } });
  expect(res.status).toBe(401);
  const holds = await fetch(`${stack.restUrl}/hold?hold_id=hold_x`, { headers: { authorization: "lsk_not_a_key" } });
  expect(holds.status).toBe(401);
  const webhooks = await fetch(`${stack.restUrl}/webhooks`, { headers: { authorization: "lsk_not_a_key" } });
  expect(webhooks.status).toBe(401);
});

it("applies the ledger's interceptors to in-memory callers: internal methods, the service token, the rate limit, request ids", async () => {
  const transport = stack.ledger.server.inProcess!.transport();
  const reservations = createClient(ReservationService, transport);
  const ledger = createClient(LedgerService, transport);
  const key = stack.account.api_key;

  // An API key cannot call the reservations only the hold service may use.
  const denied = await reservations.reserve({}, { headers: { authorization: key } }).catch((err: unknown) => err);
  expect(denied).toBeInstanceOf(ConnectError);
  expect((denied as ConnectError).code).toBe(Code.PermissionDenied);

  // A wrong service token is no service; the right one acts for the account it names.
  const wrongToken = await ledger
    .listEntities({}, { headers: { authorization: "Service not-the-token", "x-account-id": stack.account.account_id } })
    .catch((err: unknown) => err);
  expect((wrongToken as ConnectError).code).toBe(Code.Unauthenticated);
  const asService = await ledger.listEntities(
    {},
    { headers: { authorization: `Service ${TEST_SERVICE_TOKEN}`, "x-account-id": stack.account.account_id } },
  );
  expect(asService.entities.length).toBeGreaterThanOrEqual(0);

  // The caller's request id comes back; the key's budget (20, hardly refilling) runs out.
  let requestId: string | null = null;
  await ledger.listEntities(
    {},
    { headers: { authorization: key, "x-request-id": "in-memory-1" }, onHeader: (h) => (requestId = h.get("x-request-id")) },
  );
  expect(requestId).toBe("in-memory-1");
  const answers = await Promise.all(
    Array.from({ length: 20 }, () =>
      ledger.listEntities({}, { headers: { authorization: key } }).then(
        () => "ok",
        (err: ConnectError) => Code[err.code],
      ),
    ),
  );
  expect(answers).toContain("ResourceExhausted");
});
