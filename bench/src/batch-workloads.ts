// The batch workloads: one call carries BATCH_ITEMS posted transfers (POST /transaction/batch
// through wrk and rest-load.lua, LedgerService.CreateTransactions below). Their throughput is
// counted in transfers (items), not calls.
import { TransactionStatus } from "@ledger/proto/ledger/v1/ledger_pb.js";
import type { Operation } from "./closed-loop.js";
import { CallError, type Rpc } from "./connect.js";
import type { Fixtures } from "./workloads.js";

export const BATCH_WORKLOADS = ["batch", "batch-hot"] as const;
export type BatchWorkloadName = (typeof BATCH_WORKLOADS)[number];

/** Transfers per call. */
export const BATCH_ITEMS = 100;

/** The concurrencies the batch workloads run at, whatever --concurrency says (each call is 100 transfers). */
export const BATCH_CONCURRENCY = [1, 4, 16];

export const BATCH_WORKLOAD_DESCRIPTIONS: Record<BatchWorkloadName, string> = {
  batch: `batches of ${BATCH_ITEMS} posted two-party transfers, each between two random distinct entities`,
  "batch-hot": `batches of ${BATCH_ITEMS} posted transfers that all debit one entity (a payroll paid from one wallet)`,
};

export function isBatchWorkload(name: string): name is BatchWorkloadName {
  return (BATCH_WORKLOADS as readonly string[]).includes(name);
}

/** One RPC call of a batch workload; a refused item is an error of the call (none is expected). */
export function rpcBatchOperation(workload: BatchWorkloadName, rpc: Rpc, fixtures: Fixtures): Operation {
  const { entities, hot } = fixtures;
  const randomEntity = () => entities[Math.floor(Math.random() * entities.length)]!;
  const pair = (): [string, string] => {
    const from = workload === "batch-hot" ? hot : randomEntity();
    let to = randomEntity();
    while (to === from) to = randomEntity();
    return [from, to];
  };
  return async () => {
    const res = await rpc.ledger.createTransactions({
      transactions: Array.from({ length: BATCH_ITEMS }, pair).map(([from, to]) => ({
        transaction: {
          description: "bench",
          status: TransactionStatus.POSTED,
          form: { case: "transfer", value: { fromEntityId: from, toEntityId: to, amount: 1n } },
        },
      })),
    });
    if (res.failed) {
      const first = res.results.find((r) => r.result.case === "error")?.result.value as { code?: string } | undefined;
      throw new CallError(`item_${first?.code ?? "error"}`);
    }
    return BATCH_ITEMS;
  };
}
