// Test-only: LedgerService handlers for the tests that hold our transports and the unary fast path
// to Connect's answers: one that answers with headers and trailers, ones that refuse in each way a
// service can (a domain refusal with details, an error with metadata, a bug), and a wait for a
// call's signal.
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, type HandlerContext } from "@connectrpc/connect";
import { type CreateTransactionRequest, TransactionGroupSchema } from "@ledger/proto/ledger/v1/ledger_pb.js";
import { ruleViolation } from "./errors.js";

/** CreateTransaction answered with a group named after the transfer, described by `describe`, and a header and trailer set. */
export function answeringTransfer(describe: (ctx: HandlerContext) => string) {
  return (req: CreateTransactionRequest, ctx: HandlerContext) => {
    ctx.responseHeader.set("x-handler", "yes");
    ctx.responseTrailer.set("x-trailer", "done");
    const transfer = req.form.case === "transfer" ? req.form.value : undefined;
    return {
      transactionGroup: create(TransactionGroupSchema, {
        transactionGroupId: `tg_${transfer?.fromEntityId}_${transfer?.amount}`,
        description: describe(ctx),
      }),
    };
  };
}

export const refusingHandlers = {
  fundEntity: (): never => {
    throw ruleViolation("insufficient_funds", "not enough", { available: 3 });
  },
  defundEntity: (): never => {
    throw new Error("a bug with SQL text in it");
  },
  getEntity: (): never => {
    throw new ConnectError("gone", Code.NotFound, { "x-error-meta": "m" });
  },
};

/** Resolves when the call's signal ends (its deadline, its client going away), or after 5 s. */
export function untilSignalEnds(ctx: HandlerContext): Promise<void> {
  return new Promise<void>((resolve) => {
    if (ctx.signal.aborted) return resolve();
    ctx.signal.addEventListener("abort", () => resolve());
    setTimeout(resolve, 5_000).unref();
  });
}
