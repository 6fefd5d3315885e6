import { Code, createClient, type Client } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { ReservationService, ReservationStatus } from "@ledger/proto/ledger/v1/reservation_pb.js";
import { startStack, TEST_SERVICE_TOKEN, type Api, type Stack } from "@ledger/e2e";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

// The ledger's ReservationService is what holds are built on; only the hold service may call it
// (docs/architecture.md#the-services-and-who-owns-what, SECURITY.md): who may call it is
// reservations.handlers.test.ts. Here: the ids a caller chooses (reservation, capture) belong to the
// account, so two accounts never collide.

let stack: Stack;
let reservations: Client<typeof ReservationService>;

beforeAll(async () => {
  stack = await startStack();
  reservations = createClient(
    ReservationService,
    createConnectTransport({ baseUrl: stack.ledgerUrl, httpVersion: "2", useBinaryFormat: true }),
  );
});
afterAll(async () => stack?.close());

async function fundedEntity(api: Api, amount: number): Promise<string> {
  const id = (await api.post("/entity", { entity_name: "w", entity_type: "wallet" })).body.entity.entity_id as string;
  await api.post("/entity/fund", { entity_id: id, amount });
  return id;
}

/** Call options of the hold service acting for `accountId`. */
function asService(accountId: string) {
  return { headers: { authorization: `Service ${TEST_SERVICE_TOKEN}`, "x-account-id": accountId } };
}

describe("ReservationService", () => {
  it("scopes reservation and capture ids to the account: another account's same ids do not interfere", async () => {
    const a = { id: stack.account.account_id, api: stack.api };
    const other = await stack.newAccount("other");
    const b = { id: other.account.account_id, api: other.api };
    const [aSource, aSink] = [await fundedEntity(a.api, 100), await fundedEntity(a.api, 0)];
    const [bSource, bSink] = [await fundedEntity(b.api, 100), await fundedEntity(b.api, 0)];

    await reservations.reserve({ reservationId: "hold_shared", entityId: aSource, amount: 50n }, asService(a.id));
    // B may use the very same reservation id for its own money.
    const bReserved = await reservations.reserve({ reservationId: "hold_shared", entityId: bSource, amount: 30n }, asService(b.id));
    expect(bReserved.reservation).toMatchObject({ reservationId: "hold_shared", entityId: bSource, amount: 30n });
    // B captures first with the capture id A will use; A's capture is not blocked by it.
    const bCapture = await reservations.captureReservation(
      { reservationId: "hold_shared", captureId: "hold_shared:1", amount: 10n, destinationEntityId: bSink },
      asService(b.id),
    );
    const aCapture = await reservations.captureReservation(
      { reservationId: "hold_shared", captureId: "hold_shared:1", amount: 20n, destinationEntityId: aSink },
      asService(a.id),
    );
    expect(aCapture.reservation).toMatchObject({ capturedAmount: 20n, entityId: aSource });
    expect(aCapture.transactionGroup!.transactionGroupId).not.toBe(bCapture.transactionGroup!.transactionGroupId);
    // Releasing B's reservation leaves A's untouched.
    await reservations.releaseReservation({ reservationId: "hold_shared" }, asService(b.id));
    expect((await reservations.getReservation({ reservationId: "hold_shared" }, asService(a.id))).reservation).toMatchObject({
      status: ReservationStatus.ACTIVE,
      capturedAmount: 20n,
    });

    const balances = await stack.sql<{ id: string; posted: bigint; held: bigint }[]>`
      select id, posted, held from entities where id in ${stack.sql([aSource, aSink, bSource, bSink])} order by id`;
    const by = new Map(balances.map((r) => [r.id, { posted: r.posted, held: r.held }]));
    expect(by.get(aSource)).toEqual({ posted: 80n, held: 30n });
    expect(by.get(aSink)).toEqual({ posted: 20n, held: 0n });
    expect(by.get(bSource)).toEqual({ posted: 90n, held: 0n });
    expect(by.get(bSink)).toEqual({ posted: 10n, held: 0n });
  });

  it("applies many commands in one ApplyReservations call, each answered as its single call would be", async () => {
    const account = stack.account.account_id;
    const [source, sink] = [await fundedEntity(stack.api, 100), await fundedEntity(stack.api, 0)];
    const ids = [1, 2, 3].map((n) => `hold_batch_${Date.now()}_${n}`);
    const reserve = (reservationId: string, amount: bigint) => ({
      command: { case: "reserve" as const, value: { reservationId, entityId: source, amount } },
    });
    const first = await reservations.applyReservations(
      {
        commands: [
          reserve(ids[0]!, 40n),
          // More than is left after the first: refused alone, with the single call's error.
          reserve(ids[1]!, 70n),
          reserve(ids[2]!, 50n),
          // Malformed: refused alone, in its place.
          reserve("", 1n),
          { command: { case: undefined } },
        ],
      },
      asService(account),
    );
    expect(first.results.map((r) => r.result.case)).toEqual(["reserve", "error", "reserve", "error", "error"]);
    expect(first.results[0]!.result.value).toMatchObject({
      reservation: { reservationId: ids[0], amount: 40n, status: ReservationStatus.ACTIVE },
    });
    expect(first.results[1]!.result.value).toMatchObject({ code: "insufficient_funds", rpcCode: Code.FailedPrecondition });
    expect(first.results[3]!.result.value).toMatchObject({ code: "invalid_request", rpcCode: Code.InvalidArgument });
    expect(first.results[4]!.result.value).toMatchObject({ code: "invalid_request", details: { field: "commands", index: 4 } });

    // Capture and release in one call; each answers as its single call.
    const second = await reservations.applyReservations(
      {
        commands: [
          {
            command: {
              case: "capture",
              value: { reservationId: ids[0]!, captureId: `${ids[0]}:1`, amount: 40n, destinationEntityId: sink },
            },
          },
          { command: { case: "release", value: { reservationId: ids[2]! } } },
          // Nothing left to capture: refused alone.
          {
            command: {
              case: "capture",
              value: { reservationId: ids[2]!, captureId: `${ids[2]}:1`, amount: 1n, destinationEntityId: sink },
            },
          },
        ],
      },
      asService(account),
    );
    expect(second.results.map((r) => r.result.case)).toEqual(["capture", "release", "error"]);
    const captured = second.results[0]!.result.value as {
      reservation: { capturedAmount: bigint };
      transactionGroup: { transactionGroupId: string };
    };
    expect(captured.reservation.capturedAmount).toBe(40n);
    expect(second.results[1]!.result.value).toMatchObject({ reservation: { status: ReservationStatus.RELEASED } });
    expect((second.results[2]!.result.value as { rpcCode: number }).rpcCode).toBe(Code.FailedPrecondition);

    // Idempotent per item: the same commands again move no money and answer the same.
    const again = await reservations.applyReservations(
      {
        commands: [
          reserve(ids[0]!, 40n),
          {
            command: {
              case: "capture",
              value: { reservationId: ids[0]!, captureId: `${ids[0]}:1`, amount: 40n, destinationEntityId: sink },
            },
          },
        ],
      },
      asService(account),
    );
    expect(again.results.map((r) => r.result.case)).toEqual(["reserve", "capture"]);
    expect((again.results[1]!.result.value as typeof captured).transactionGroup.transactionGroupId).toBe(
      captured.transactionGroup.transactionGroupId,
    );
    const rows = await stack.sql<{ id: string; posted: bigint; held: bigint }[]>`
      select id, posted, held from entities where id in ${stack.sql([source, sink])}`;
    const by = new Map(rows.map((r) => [r.id, { posted: r.posted, held: r.held }]));
    expect(by.get(source)).toEqual({ posted: 60n, held: 0n });
    expect(by.get(sink)).toEqual({ posted: 40n, held: 0n });
  });
});
