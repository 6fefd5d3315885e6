import { Code, ConnectError, createClient, type Client } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { ReservationService } from "@ledger/proto/ledger/v1/reservation_pb.js";
import { startStack, TEST_SERVICE_TOKEN, type Api, type Stack } from "@ledger/e2e";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

// The ledger's ReservationService is what holds are built on; only the hold service may call it
// (docs/architecture.md#the-services-and-who-owns-what, SECURITY.md). A customer's API key is refused and changes nothing, and the ids a
// caller chooses (reservation, capture) belong to the account, so two accounts never collide.

let stack: Stack;
let reservations: Client<typeof ReservationService>;

beforeAll(async () => {
  stack = await startStack();
  reservations = createClient(ReservationService, createConnectTransport({ baseUrl: stack.ledgerUrl, httpVersion: "2", useBinaryFormat: true }));
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

async function codeOf(call: Promise<unknown>): Promise<Code | "ok"> {
  try {
    await call;
    return "ok";
  } catch (err) {
    return ConnectError.from(err).code;
  }
}

describe("ReservationService", () => {
  it("refuses a customer's API key with permission_denied on every method and changes nothing", async () => {
    const source = await fundedEntity(stack.api, 100);
    const sink = await fundedEntity(stack.api, 0);
    const asCustomer = { headers: { authorization: stack.account.api_key } };
    // One reservation made by the service, so capture, release and get have something to reach for.
    await reservations.reserve({ reservationId: "hold_perm_1", entityId: source, amount: 40n }, asService(stack.account.account_id));

    expect(await codeOf(reservations.reserve({ reservationId: "hold_perm_2", entityId: source, amount: 10n }, asCustomer))).toBe(Code.PermissionDenied);
    expect(
      await codeOf(reservations.captureReservation({ reservationId: "hold_perm_1", captureId: "hold_perm_1:1", amount: 5n, destinationEntityId: sink }, asCustomer)),
    ).toBe(Code.PermissionDenied);
    expect(await codeOf(reservations.releaseReservation({ reservationId: "hold_perm_1" }, asCustomer))).toBe(Code.PermissionDenied);
    expect(await codeOf(reservations.getReservation({ reservationId: "hold_perm_1" }, asCustomer))).toBe(Code.PermissionDenied);

    // Over plain HTTP the refusal is a 403 with the code permission_denied, and a Bearer key is no different.
    const res = await fetch(`${stack.ledgerUrl}/ledger.v1.ReservationService/ReleaseReservation`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${stack.account.api_key}` },
      body: JSON.stringify({ reservationId: "hold_perm_1" }),
    });
    expect(res.status).toBe(403);
    expect(((await res.json()) as { code: string }).code).toBe("permission_denied");

    const [entity] = await stack.sql<{ held: bigint; posted: bigint }[]>`select held, posted from entities where id = ${source}`;
    expect(entity).toEqual({ held: 40n, posted: 100n });
    const rows = await stack.sql<{ id: string; status: string; captured_amount: bigint }[]>`
      select id, status, captured_amount from reservations where entity_id = ${source}`;
    expect(rows).toEqual([{ id: "hold_perm_1", status: "active", captured_amount: 0n }]);
    // A missing key is still unauthenticated, not a permission question.
    expect(await codeOf(reservations.getReservation({ reservationId: "hold_perm_1" }))).toBe(Code.Unauthenticated);
  });

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
    expect((await reservations.getReservation({ reservationId: "hold_shared" }, asService(a.id))).reservation).toMatchObject({ status: "active", capturedAmount: 20n });

    const balances = await stack.sql<{ id: string; posted: bigint; held: bigint }[]>`
      select id, posted, held from entities where id in ${stack.sql([aSource, aSink, bSource, bSink])} order by id`;
    const by = new Map(balances.map((r) => [r.id, { posted: r.posted, held: r.held }]));
    expect(by.get(aSource)).toEqual({ posted: 80n, held: 30n });
    expect(by.get(aSink)).toEqual({ posted: 20n, held: 0n });
    expect(by.get(bSource)).toEqual({ posted: 90n, held: 0n });
    expect(by.get(bSink)).toEqual({ posted: 10n, held: 0n });
  });
});
