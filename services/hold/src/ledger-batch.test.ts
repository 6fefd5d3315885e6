import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { createLogger, errorCodeOf, ruleViolation } from "@ledger/common";
import {
  ApplyReservationsResponseSchema,
  ReserveResponseSchema,
  type ApplyReservationsRequest,
  type ReserveRequest,
} from "@ledger/proto/ledger/v1/reservation_pb.js";
import { describe, expect, it } from "vitest";
import { createLedgerBatch } from "./ledger-batch.js";
import type { LedgerClients } from "./ledger-client.js";

// The hold service's batched calls to the ledger, against a fake ledger: how many calls the
// commands of concurrent holds take, and that each command gets exactly what its single call
// would have given it.

const log = createLogger("test", "error", { write: () => {} });

/** A fake ledger: reserves anything below 100, refuses the rest as the ledger does. */
function fakeLedger(options: { batched?: boolean; failWith?: ConnectError } = {}) {
  const calls: Array<{ method: string; accountId: string; size: number }> = [];
  const reserveAnswer = (req: ReserveRequest) => {
    if (req.amount >= 100n) throw ruleViolation("insufficient_funds", `cannot reserve ${req.amount}`, { requested: Number(req.amount) });
    return create(ReserveResponseSchema, { reservation: { reservationId: req.reservationId, amount: req.amount } });
  };
  const ledger = {
    asAccount: (accountId: string) => ({ headers: { "x-account-id": accountId } }),
    reservations: {
      async applyReservations(req: ApplyReservationsRequest, callOptions: { headers: Record<string, string> }) {
        calls.push({ method: "apply", accountId: callOptions.headers["x-account-id"]!, size: req.commands.length });
        await new Promise((resolve) => setTimeout(resolve, 5));
        if (options.batched === false) throw new ConnectError("not here", Code.Unimplemented);
        if (options.failWith) throw options.failWith;
        return create(ApplyReservationsResponseSchema, {
          results: req.commands.map((item) => {
            if (item.command.case !== "reserve") throw new Error("the fake reserves only");
            try {
              return { result: { case: "reserve" as const, value: reserveAnswer(item.command.value) } };
            } catch (err) {
              const error = ConnectError.from(err);
              const { code, details } = errorCodeOf(error);
              return { result: { case: "error" as const, value: { code, message: error.rawMessage, details, rpcCode: error.code } } };
            }
          }),
        });
      },
      async reserve(req: ReserveRequest, callOptions: { headers: Record<string, string> }) {
        calls.push({ method: "reserve", accountId: callOptions.headers["x-account-id"]!, size: 1 });
        return reserveAnswer(req);
      },
    },
  } as unknown as LedgerClients;
  return { ledger, calls };
}

const settings = { log, maxBatch: 64, maxInFlight: 1, lingerMs: 1 };

async function settle<T>(promise: Promise<T>): Promise<T | ConnectError> {
  return promise.catch((err: unknown) => ConnectError.from(err));
}

describe("createLedgerBatch", () => {
  it("sends the commands of concurrent holds in few calls, one account per call, each answered on its own", async () => {
    const { ledger, calls } = fakeLedger();
    const batch = createLedgerBatch({ ledger, ...settings });
    const answers = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        settle(batch.reserve(i % 2 === 0 ? "acc_a" : "acc_b", { reservationId: `hold_${i}`, entityId: "e", amount: i === 7 ? 100n : 10n })),
      ),
    );
    // The first goes alone (nothing in flight); the other 19 wait for it and go together, split by account.
    expect(calls.length).toBeLessThanOrEqual(3);
    expect(calls.reduce((n, c) => n + c.size, 0)).toBe(20);
    answers.forEach((answer, i) => {
      if (i === 7) {
        // The single call's error, rebuilt: its RPC code, its error code and its details.
        expect(answer).toBeInstanceOf(ConnectError);
        const err = answer as ConnectError;
        expect(err.code).toBe(Code.FailedPrecondition);
        expect(errorCodeOf(err)).toEqual({ code: "insufficient_funds", details: { requested: 100 } });
        expect(err.rawMessage).toBe("cannot reserve 100");
      } else {
        expect(answer).toMatchObject({ reservation: { reservationId: `hold_${i}`, amount: 10n } });
      }
    });
  });

  it("never puts two commands on one reservation in one call", async () => {
    const { ledger, calls } = fakeLedger();
    const batch = createLedgerBatch({ ledger, ...settings });
    await Promise.all([1, 2, 3].map(() => batch.reserve("acc_a", { reservationId: "hold_same", entityId: "e", amount: 1n })));
    expect(calls.map((c) => c.size)).toEqual([1, 1, 1]);
  });

  it("rejects every command of a call that failed as a whole with that call's error, so recovery repeats them", async () => {
    const failure = new ConnectError("ledger unreachable", Code.Unavailable);
    const { ledger } = fakeLedger({ failWith: failure });
    const batch = createLedgerBatch({ ledger, ...settings });
    const answers = await Promise.all(
      [1, 2, 3].map((i) => settle(batch.reserve("acc_a", { reservationId: `hold_${i}`, entityId: "e", amount: 1n }))),
    );
    for (const answer of answers) expect((answer as ConnectError).code).toBe(Code.Unavailable);
  });

  it("falls back to single calls against a ledger without ApplyReservations", async () => {
    const { ledger, calls } = fakeLedger({ batched: false });
    const batch = createLedgerBatch({ ledger, ...settings });
    const first = await batch.reserve("acc_a", { reservationId: "hold_1", entityId: "e", amount: 5n });
    expect(first.reservation).toMatchObject({ reservationId: "hold_1" });
    const refused = await settle(batch.reserve("acc_a", { reservationId: "hold_2", entityId: "e", amount: 500n }));
    expect((refused as ConnectError).code).toBe(Code.FailedPrecondition);
    // One try of the batched call, then single calls only.
    expect(calls.map((c) => c.method)).toEqual(["apply", "reserve", "reserve"]);
  });
});
