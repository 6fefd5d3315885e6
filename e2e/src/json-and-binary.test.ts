import { toJson, type DescService, type JsonValue, type MessageInitShape } from "@bufbuild/protobuf";
import { createClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import { HoldService } from "@ledger/proto/hold/v1/hold_pb.js";
import { IdentityService } from "@ledger/proto/ledger/v1/identity_pb.js";
import {
  BalanceAlertField,
  BalanceAlertOperator,
  type CreateTransactionsRequestSchema,
  Direction,
  LedgerService,
  TransactionStatus,
} from "@ledger/proto/ledger/v1/ledger_pb.js";
import { ReservationService } from "@ledger/proto/ledger/v1/reservation_pb.js";
import { NotificationService } from "@ledger/proto/notification/v1/notification_pb.js";
import { timestampOfMicros } from "@ledger/common";
import { startWebhookReceiver, type WebhookReceiver } from "@ledger/testing";
import { afterAll, beforeAll, expect, it } from "vitest";
import { readStream } from "./events.js";
import { startStack, TEST_SERVICE_TOKEN, type Stack } from "./stack.js";

// Every RPC answers the same fields whether the caller speaks binary protobuf or JSON
// (docs/api.md#rpc). The same story of calls, every unary method the three services serve, runs over
// Connect on HTTP/2 in binary (the services' fast path), in JSON (connect-node) and over gRPC in
// JSON, each time for a new account, and every answer is compared field for field with the binary
// one once the values that differ between two runs by nature (ids, times, secrets, cursors,
// durations) are replaced by their kind. An answer that one format writes in full and another
// does not shows up here.

const SERVICES: DescService[] = [LedgerService, ReservationService, IdentityService, HoldService, NotificationService];

let stack: Stack;
let receiver: WebhookReceiver;
beforeAll(async () => {
  receiver = await startWebhookReceiver();
  stack = await startStack({ notification: { webhookExtraCa: receiver.ca } });
});
afterAll(async () => {
  await stack?.close();
  await receiver?.close();
});

/** One answer as the caller decoded it: the method, and the message as JSON with run-specific values replaced. */
interface Answer {
  method: string;
  message: JsonValue;
}

const ID = /\b(acct|prg|ent|trx-grp|trx|hold|evt|whe|whd|key|bal)_[0-9a-hjkmnp-tv-z]{26}\b/g;
const TIME = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/;
/** Fields whose values depend on how long something took. */
const DURATIONS = new Set(["durationMs", "avgMs"]);

/**
 * The message with what differs between two runs replaced by its kind. Lists are compared as
 * sets: ids made in the same millisecond (a batch's groups and their events) sort in random order.
 */
function normalize(value: JsonValue): JsonValue {
  if (typeof value === "string") {
    if (TIME.test(value)) return "<time>";
    return value.replace(ID, "$1_<id>").replace(/whsec_[\w-]+/g, "whsec_<secret>");
  }
  if (Array.isArray(value)) {
    return value.map(normalize).sort((a, b) => (JSON.stringify(a) < JSON.stringify(b) ? -1 : 1));
  }
  if (value !== null && typeof value === "object") {
    const out: Record<string, JsonValue> = {};
    for (const [key, v] of Object.entries(value)) {
      if (DURATIONS.has(key)) continue;
      out[key] = key === "nextCursor" ? "<cursor>" : normalize(v);
    }
    return out;
  }
  return value;
}

/** How a story's calls travel: Connect in binary (the services' fast path) or JSON (connect-node), or gRPC in JSON. */
type Wire = "connect binary" | "connect json" | "grpc json";

/** Clients of every service over `wire`; each answer they receive is appended to `answers`. */
function clientsOf(wire: Wire, apiKey: string, accountId: string, answers: Answer[]) {
  const record: Interceptor = (next) => async (req) => {
    const res = await next(req);
    if (!res.stream)
      answers.push({ method: `${req.service.typeName}/${req.method.name}`, message: normalize(toJson(req.method.output, res.message)) });
    return res;
  };
  const transport = (baseUrl: string, headers: Record<string, string>) => {
    const authorize: Interceptor = (next) => (req) => {
      for (const [name, value] of Object.entries(headers)) req.header.set(name, value);
      return next(req);
    };
    const options = { baseUrl, useBinaryFormat: wire === "connect binary", interceptors: [authorize, record] };
    return wire === "grpc json" ? createGrpcTransport(options) : createConnectTransport({ ...options, httpVersion: "2" });
  };
  const key = { authorization: apiKey };
  return {
    ledger: createClient(LedgerService, transport(stack.ledgerUrl, key)),
    reservations: createClient(
      ReservationService,
      transport(stack.ledgerUrl, { authorization: `Service ${TEST_SERVICE_TOKEN}`, "x-account-id": accountId }),
    ),
    identity: createClient(IdentityService, transport(stack.ledgerUrl, {})),
    hold: createClient(HoldService, transport(stack.hold!.server.url, key)),
    notification: createClient(NotificationService, transport(stack.notification!.server.url, key)),
  };
}

/** Waits until every event of the account's writes is stored by the notification service and delivered to `endpointId`. */
async function settle(account: { account_id: string; api_key: string }, endpointId: string) {
  const notification = createClient(
    NotificationService,
    createConnectTransport({ baseUrl: stack.notification!.server.url, httpVersion: "2", useBinaryFormat: true }),
  );
  const headers = { authorization: account.api_key };
  // Every stack of a test run writes to one ledger database: this stack's rows carry its subject prefix.
  await expect
    .poll(async () => {
      const [ledger] = await stack.sql<{ n: number }[]>`
        select count(*)::int as n from outbox_writes where subjects[1] like ${`${stack.subjectPrefix}.%`}`;
      const [hold] = await stack.holdSql()<{ n: number }[]>`select count(*)::int as n from outbox_writes`;
      return ledger!.n + hold!.n;
    })
    .toBe(0);
  const published = (await readStream(stack.natsUrl, stack.stream)).filter((m) => m.event.accountId === account.account_id).length;
  expect(published).toBeGreaterThan(10);
  await expect.poll(async () => (await notification.listEvents({ limit: 100 }, { headers })).events.length).toBe(published);
  await expect
    .poll(async () => {
      const { deliveries } = await notification.listDeliveries({ endpointId, limit: 100 }, { headers });
      return deliveries.filter((d) => d.responseStatus === 200).length;
    })
    .toBe(published);
}

/** The same calls, in the same order, for a new account: every method of every service at least once. */
async function story(wire: Wire): Promise<Answer[]> {
  const { account } = await stack.newAccount("formats");
  const answers: Answer[] = [];
  const c = clientsOf(wire, account.api_key, account.account_id, answers);
  const hook = await c.notification.createEndpoint({ url: receiver.endpoint("/formats"), name: "all events" });
  const endpointId = hook.endpoint!.endpointId;

  await c.identity.authenticate({ apiKey: account.api_key });
  await c.ledger.getProgram({});
  const { program } = await c.ledger.createProgram({ programName: "Second", currencyCode: "EUR" });
  await c.ledger.updateProgram({ programId: program!.programId, programName: "Renamed" });
  await c.ledger.listPrograms({});

  const alice = (await c.ledger.createEntity({ entityName: "Alice", entityType: "customer", metadata: { tier: "gold", n: 2 } })).entity!
    .entityId;
  const bob = (await c.ledger.createEntity({ entityName: "Bob", entityType: "customer" })).entity!.entityId;
  await c.ledger.updateEntity({ entityId: alice, entityName: "Alice B", metadata: { n: null, since: 2026 }, overdraftLimit: 100n });
  const carol = (await c.ledger.createEntity({ entityName: "Carol", entityType: "customer" })).entity!.entityId;
  await c.ledger.freezeEntity({ entityId: carol, reason: "review" });
  await c.ledger.unfreezeEntity({ entityId: carol });
  await c.ledger.closeEntity({ entityId: carol });
  const { credit } = await c.ledger.fundEntity({ entityId: alice, amount: 10_000n, description: "Salary" });
  await c.ledger.defundEntity({ entityId: alice, amount: 50n });
  // A moment after those writes, by the database's clock, so every run's balances as of it are alike.
  const [moment] = await stack.sql<{ us: bigint }[]>`select (extract(epoch from clock_timestamp()) * 1000000)::int8 as us`;
  await c.ledger.getEntity({ entityId: alice, asOf: timestampOfMicros(moment!.us) });
  await c.ledger.getEntityStatement({ entityId: alice, from: timestampOfMicros(0n), to: timestampOfMicros(moment!.us), limit: 1 });
  // Crossed by the first pending transfer below, which takes available under 9,500.
  const { alert } = await c.ledger.createBalanceAlert({
    entityId: alice,
    field: BalanceAlertField.AVAILABLE,
    operator: BalanceAlertOperator.LT,
    value: 9_500n,
  });
  await c.ledger.listBalanceAlerts({ entityId: alice });

  const transfer = (amount: bigint, status = TransactionStatus.PENDING) =>
    c.ledger
      .createTransaction({
        description: "Rent",
        status,
        metadata: { invoice: "2026-11", lines: [1, 2] },
        form: { case: "transfer", value: { fromEntityId: alice, toEntityId: bob, amount } },
      })
      .then((r) => r.transactionGroup!.transactionGroupId);
  await c.ledger.postTransaction({ transactionGroupId: await transfer(1_000n) });
  await c.ledger.cancelTransaction({ transactionGroupId: await transfer(200n) });
  await c.ledger.failTransaction({ transactionGroupId: await transfer(300n), reason: "bounced" });
  await c.ledger.disputeTransaction({ transactionGroupId: await transfer(100n, TransactionStatus.POSTED), reason: "not mine" });
  const split = await c.ledger.createTransaction({
    description: "Split",
    status: TransactionStatus.POSTED,
    form: {
      case: "entries",
      value: {
        entries: [
          { entityId: alice, direction: Direction.DEBIT, amount: 500n },
          { entityId: bob, direction: Direction.CREDIT, amount: 500n },
        ],
      },
    },
  });
  await c.ledger.reverseTransaction({ transactionGroupId: split.transactionGroup!.transactionGroupId, description: "Undo" });

  // Two applied items (alike, so their order among ids of one millisecond does not matter) and a refused one.
  const item = {
    transaction: {
      description: "Payout",
      status: TransactionStatus.POSTED,
      form: { case: "transfer" as const, value: { fromEntityId: alice, toEntityId: bob, amount: 10n } },
    },
  };
  const batch: MessageInitShape<typeof CreateTransactionsRequestSchema> = {
    transactions: [
      item,
      item,
      {
        transaction: {
          description: "Too much",
          form: { case: "transfer", value: { fromEntityId: alice, toEntityId: bob, amount: 1_000_000n } },
        },
      },
    ],
  };
  // The second call replays the first's stored answer.
  await c.ledger.createTransactions(batch, { headers: { "idempotency-key": "payouts" } });
  await c.ledger.createTransactions(batch, { headers: { "idempotency-key": "payouts" } });

  await c.ledger.getEntity({ entityId: alice });
  await c.ledger.listEntities({});
  await c.ledger.getTransaction({ entityId: alice, transactionId: credit!.transactionId });
  await c.ledger.listTransactions({ entityId: alice, limit: 5 });
  await c.ledger.getTransactionGroup({ transactionGroupId: credit!.transactionGroupId });
  await c.ledger.deleteBalanceAlert({ alertId: alert!.alertId });
  await c.ledger.listTransactionGroups({ metadata: { invoice: "2026-11" }, limit: 3 });

  const held = (await c.hold.createHold({ entityId: alice, amount: 700n, description: "Deposit" })).hold!.holdId;
  await c.hold.getHold({ holdId: held });
  await c.hold.captureHold({ holdId: held, amount: 200n, destinationEntityId: bob, description: "First part" });
  await c.hold.releaseHold({ holdId: held });
  await c.hold.listHolds({ entityId: alice });

  await c.reservations.reserve({ reservationId: "res-1", entityId: alice, amount: 40n });
  await c.reservations.getReservation({ reservationId: "res-1" });
  await c.reservations.captureReservation({ reservationId: "res-1", captureId: "res-1:1", amount: 15n, destinationEntityId: bob });
  await c.reservations.releaseReservation({ reservationId: "res-1" });
  await c.reservations.applyReservations({
    commands: [
      { command: { case: "reserve", value: { reservationId: "res-2", entityId: alice, amount: 30n } } },
      { command: { case: "capture", value: { reservationId: "res-2", captureId: "res-2:1", amount: 5n, destinationEntityId: bob } } },
      { command: { case: "release", value: { reservationId: "res-2" } } },
      { command: { case: "release", value: { reservationId: "res-unknown" } } },
    ],
  });

  await settle(account, endpointId);
  const { events } = await c.notification.listEvents({ limit: 100 });
  const first = events[events.length - 1]!.eventId;
  await c.notification.getEvent({ eventId: first });
  const { deliveries } = await c.notification.listDeliveries({ endpointId, limit: 100 });
  await c.notification.listDeliveryAttempts({ deliveryId: deliveries.find((d) => d.eventId === first)!.deliveryId, limit: 10 });
  await c.notification.getEndpoint({ endpointId });
  const other = (
    await c.notification.createEndpoint({
      url: receiver.endpoint("/formats-other"),
      name: "Held",
      eventTypes: { types: ["hold.released"] },
    })
  ).endpoint!.endpointId;
  await c.notification.updateEndpoint({ endpointId: other, name: "Renamed", enabled: false, maxConcurrency: 3 });
  await c.notification.rollEndpointSecret({ endpointId: other, expirePreviousInSeconds: 60n });
  await c.notification.listEndpoints({});
  await c.notification.deleteEndpoint({ endpointId: other });
  await c.notification.resendDelivery({ deliveryId: deliveries.find((d) => d.eventId === first)!.deliveryId });
  return answers;
}

it("answers every RPC with the same fields in binary and in JSON", async () => {
  const binary = await story("connect binary");
  const every = SERVICES.flatMap((s) => s.methods.filter((m) => m.methodKind === "unary").map((m) => `${s.typeName}/${m.name}`));
  expect(new Set(binary.map((a) => a.method))).toEqual(new Set(every));
  expect(await story("connect json")).toEqual(binary);
  expect(await story("grpc json")).toEqual(binary);
});
