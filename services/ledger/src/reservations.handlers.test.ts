import { Code, ConnectError, createClient, type CallOptions } from "@connectrpc/connect";
import { ACCOUNT_HEADER, errorCodeOf, newId } from "@ledger/common";
import { refusalHandlers } from "@ledger/e2e";
import { LedgerService } from "@ledger/proto/ledger/v1/ledger_pb.js";
import { ReservationService } from "@ledger/proto/ledger/v1/reservation_pb.js";
import { describe, expect, it } from "vitest";

// Who may call the ledger's RPCs, decided by its authentication before any handler runs, so checked
// here against the handlers in memory with no database: the ReservationService that holds are built
// on is the hold service's alone (docs/architecture.md#the-services-and-who-owns-what); a customer's
// key is refused, and the installation's service token acts for an account. What reservations do
// with money is reservations.test.ts.

// After each test, nothing behind the handlers was reached.
const handlers = refusalHandlers();

/** How a call ended: "ok", or its RPC code and the error code of the envelope. */
async function outcome(call: Promise<unknown>): Promise<string> {
  try {
    await call;
    return "ok";
  } catch (err) {
    const error = ConnectError.from(err);
    return `${Code[error.code]} ${errorCodeOf(error).code}`;
  }
}

const reservationId = newId("hold");
const entityId = newId("entity");

describe("ReservationService", () => {
  const reservations = () => createClient(ReservationService, handlers().ledger);
  const asService = (accountId = handlers().principal.accountId, token = handlers().serviceToken): CallOptions => ({
    headers: { authorization: `Service ${token}`, [ACCOUNT_HEADER]: accountId },
  });

  it("refuses a customer's API key with permission_denied on every method, in either spelling", async () => {
    for (const authorization of [handlers().apiKey, `Bearer ${handlers().apiKey}`]) {
      const asCustomer = { headers: { authorization } };
      const calls = [
        reservations().reserve({ reservationId, entityId, amount: 10n }, asCustomer),
        reservations().captureReservation(
          { reservationId, captureId: `${reservationId}:1`, amount: 5n, destinationEntityId: entityId },
          asCustomer,
        ),
        reservations().releaseReservation({ reservationId }, asCustomer),
        reservations().getReservation({ reservationId }, asCustomer),
        reservations().applyReservations(
          { commands: [{ command: { case: "reserve", value: { reservationId, entityId, amount: 10n } } }] },
          asCustomer,
        ),
      ];
      expect(await Promise.all(calls.map(outcome))).toEqual(Array(5).fill("PermissionDenied permission_denied"));
    }
  });

  it("answers unauthenticated, not a permission question, without a key, with a wrong token, or without the account", async () => {
    expect(await outcome(reservations().getReservation({ reservationId }))).toBe("Unauthenticated unauthenticated");
    expect(await outcome(reservations().getReservation({ reservationId }, { headers: { authorization: "lsk_not-a-key" } }))).toBe(
      "Unauthenticated unauthenticated",
    );
    expect(await outcome(reservations().getReservation({ reservationId }, asService(undefined, "not-the-token")))).toBe(
      "Unauthenticated unauthenticated",
    );
    expect(await outcome(reservations().getReservation({ reservationId }, asService(newId("account"))))).toBe(
      "Unauthenticated unauthenticated",
    );
    expect(
      await outcome(reservations().getReservation({ reservationId }, { headers: { authorization: `Service ${handlers().serviceToken}` } })),
    ).toBe("Unauthenticated unauthenticated");
  });

  it("lets the service token act for an account: past authentication, to the handler's own checks", async () => {
    expect(await outcome(reservations().reserve({ reservationId: "", entityId, amount: 10n }, asService()))).toBe(
      "InvalidArgument invalid_request",
    );
    expect(await outcome(reservations().reserve({ reservationId, entityId, amount: 0n }, asService()))).toBe(
      "InvalidArgument invalid_request",
    );
    expect(
      await outcome(
        reservations().captureReservation({ reservationId, captureId: "", amount: 5n, destinationEntityId: entityId }, asService()),
      ),
    ).toBe("InvalidArgument invalid_request");
  });
});

describe("ReservationService.ApplyReservations", () => {
  const reservations = () => createClient(ReservationService, handlers().ledger);
  const asService = (): CallOptions => ({
    headers: { authorization: `Service ${handlers().serviceToken}`, [ACCOUNT_HEADER]: handlers().principal.accountId },
  });

  it("refuses a call of no commands or of more than 1,000, naming the field, before anything is applied", async () => {
    const command = { command: { case: "release" as const, value: { reservationId } } };
    for (const count of [0, 1_001]) {
      const err = ConnectError.from(
        await reservations()
          .applyReservations({ commands: Array.from({ length: count }, () => command) }, asService())
          .catch((e: unknown) => e),
      );
      expect(err.code).toBe(Code.InvalidArgument);
      expect(errorCodeOf(err)).toMatchObject({ code: "invalid_request", details: { field: "commands" } });
    }
  });
});

describe("LedgerService", () => {
  const ledger = () => createClient(LedgerService, handlers().ledger);

  it("needs a valid key, and takes it in any spelling of Bearer", async () => {
    expect(await outcome(ledger().fundEntity({ entityId, amount: 0n }))).toBe("Unauthenticated unauthenticated");
    expect(await outcome(ledger().fundEntity({ entityId, amount: 0n }, { headers: { authorization: "lsk_not-a-key" } }))).toBe(
      "Unauthenticated unauthenticated",
    );
    for (const authorization of [
      handlers().apiKey,
      `Bearer ${handlers().apiKey}`,
      `bEaReR   ${handlers().apiKey}`,
      `Bearer\t${handlers().apiKey}`,
    ]) {
      // Past authentication: refused for the amount.
      expect(await outcome(ledger().fundEntity({ entityId, amount: 0n }, { headers: { authorization } })), authorization).toBe(
        "InvalidArgument invalid_request",
      );
    }
  });

  it("refuses a batch of no items or of more than 1,000, naming the field", async () => {
    const headers = { authorization: handlers().apiKey };
    for (const count of [0, 1_001]) {
      const err = ConnectError.from(
        await ledger()
          .createTransactions({ transactions: Array.from({ length: count }, () => ({})) }, { headers })
          .catch((e: unknown) => e),
      );
      expect(err.code).toBe(Code.InvalidArgument);
      expect(errorCodeOf(err).details).toMatchObject({ field: "transactions" });
    }
  });
});
