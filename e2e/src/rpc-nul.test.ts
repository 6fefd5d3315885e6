import type { JsonObject } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { HoldService } from "@ledger/proto/hold/v1/hold_pb.js";
import { TransactionStatus } from "@ledger/proto/ledger/v1/ledger_pb.js";
import { NotificationService } from "@ledger/proto/notification/v1/notification_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startStack, type Stack } from "./stack.js";

// Callers inside the installation call the services over Connect RPC without the gateway: a NUL
// character (which Postgres text cannot hold) in any string of a request, wherever it sits, is
// refused as the caller's mistake (invalid_argument, HTTP 400), before the handler runs, on every
// service; never a 500, and a batch with one such item is refused whole before any transaction.

let stack: Stack;
let alice: string;
let bob: string;

beforeAll(async () => {
  stack = await startStack({ notification: {} });
  alice = (await stack.api.post("/entity", { entity_name: "alice", entity_type: "w" })).body.entity.entity_id;
  bob = (await stack.api.post("/entity", { entity_name: "bob", entity_type: "w" })).body.entity.entity_id;
  await stack.api.post("/entity/fund", { entity_id: alice, amount: 1_000 });
}, 60_000);
afterAll(async () => stack?.close());

const withKey =
  (key: string): Interceptor =>
  (next) =>
  (req) => {
    req.header.set("authorization", key);
    return next(req);
  };

function clientOf<S extends typeof HoldService | typeof NotificationService>(service: S, url: string) {
  return createClient(service, createConnectTransport({ baseUrl: url, httpVersion: "2", interceptors: [withKey(stack.account.api_key)] }));
}

async function refusal(call: Promise<unknown>): Promise<ConnectError> {
  const err = await call.then(
    () => undefined,
    (e: unknown) => ConnectError.from(e),
  );
  expect(err, "the call succeeded").toBeInstanceOf(ConnectError);
  return err!;
}

async function expectNulRefused(call: Promise<unknown>, field: string) {
  const err = await refusal(call);
  expect(err.code, `${field}: ${err.rawMessage}`).toBe(Code.InvalidArgument);
  expect(err.rawMessage).toContain(field);
  expect(err.rawMessage).toMatch(/NUL/);
}

async function balances() {
  const rows = await stack.sql`select id, posted::text, pending_debits::text, pending_credits::text, held::text from entities order by id`;
  return JSON.stringify(rows);
}

describe("NUL in an RPC request", () => {
  it("is refused on the ledger, in names, filters, cursors and descriptions", async () => {
    const ledger = stack.ledgerClient(stack.account.api_key);
    await expectNulRefused(ledger.listEntities({ entityType: "w\u0000" }), "entity_type");
    await expectNulRefused(ledger.createEntity({ entityName: "n", entityType: "w\u0000" }), "entity_type");
    await expectNulRefused(ledger.createProgram({ programName: "p\u0000" }), "program_name");
    await expectNulRefused(ledger.getEntity({ entityId: "ent_\u0000" }), "entity_id");
    await expectNulRefused(ledger.listTransactions({ entityId: alice, cursor: "\u0000" }), "cursor");
    await expectNulRefused(ledger.fundEntity({ entityId: alice, amount: 1n, description: "\u0000" }), "description");
  });

  it("in a batch item's idempotency key refuses the whole batch before any item is applied", async () => {
    const ledger = stack.ledgerClient(stack.account.api_key);
    const before = await balances();
    const item = (idempotencyKey: string) => ({
      idempotencyKey,
      transaction: {
        description: "d",
        status: TransactionStatus.POSTED,
        form: { case: "transfer" as const, value: { fromEntityId: alice, toEntityId: bob, amount: 1n } },
      },
    });
    await expectNulRefused(ledger.createTransactions({ transactions: [item("fine"), item("k\u0000")] }), "transactions[1].idempotency_key");
    expect(await balances()).toBe(before);
  });

  it("is refused in metadata keys and values", async () => {
    const ledger = stack.ledgerClient(stack.account.api_key);
    const cases: JsonObject[] = [{ note: "a\u0000" }, { "k\u0000": 1 }, { list: [{ deep: "\u0000" }] }];
    for (const metadata of cases) {
      const err = await refusal(ledger.createEntity({ entityName: "n", entityType: "w", metadata }));
      expect(err.code, err.rawMessage).toBe(Code.InvalidArgument);
      expect(err.rawMessage).toMatch(/NUL/);
    }
  });

  it("is refused by the hold and notification services", async () => {
    const hold = clientOf(HoldService, stack.hold!.server.url);
    await expectNulRefused(hold.createHold({ entityId: alice, amount: 1n, description: "h\u0000" }), "description");
    await expectNulRefused(hold.listHolds({ entityId: alice, cursor: "\u0000" }), "cursor");
    const notification = clientOf(NotificationService, stack.notification!.server.url);
    await expectNulRefused(notification.createEndpoint({ url: "https://example.com/hook", name: "\u0000" }), "name");
    await expectNulRefused(notification.listEvents({ cursor: "\u0000" }), "cursor");
    await expectNulRefused(
      notification.createEndpoint({ url: "https://example.com/hook", eventTypes: { types: ["transaction.created\u0000"] } }),
      "event_types",
    );
  });

  it("is refused only after authentication: without a key the answer is unauthenticated", async () => {
    const ledger = stack.ledgerClient("lsk_not-a-key");
    expect((await refusal(ledger.listEntities({ entityType: "\u0000" }))).code).toBe(Code.Unauthenticated);
  });
});
