// Test-only: LedgerService handlers for the tests that hold our transports and the unary fast path
// to Connect's answers: one that answers with headers and trailers, ones that refuse in each way a
// service can (a domain refusal with details, an error with metadata, a bug), and a wait for a
// call's signal.
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, type HandlerContext } from "@connectrpc/connect";
import { ErrorDetailSchema } from "@ledger/proto/common/v1/common_pb.js";
import { type CreateTransactionRequest, TransactionGroupSchema } from "@ledger/proto/ledger/v1/ledger_pb.js";

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
  // As the services refuse a rule's violation (@ledger/common's `ruleViolation`).
  fundEntity: (): never => {
    const detail = create(ErrorDetailSchema, { code: "insufficient_funds", details: { available: 3 } });
    throw new ConnectError("not enough", Code.FailedPrecondition, undefined, [{ desc: ErrorDetailSchema, value: detail }]);
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
