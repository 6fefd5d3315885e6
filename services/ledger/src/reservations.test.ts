import { createClient, type Client } from "@connectrpc/connect";
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
});
