// The batch workloads: one call carries BATCH_ITEMS posted transfers (POST /transaction/batch,
// LedgerService.CreateTransactions). Their throughput is counted in transfers (items), not calls.
import { TransactionStatus } from "@ledger/proto/ledger/v1/ledger_pb.js";
import { CallError, type Rest, type Rpc } from "./clients.js";
import type { Operation } from "./closed-loop.js";
import type { Fixtures, Transport } from "./workloads.js";

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

/** One call of a batch workload; a refused item is an error of the call (none is expected). */
export function batchOperation(
  workload: BatchWorkloadName,
  transport: Transport,
  clients: { rest: Rest; rpc: Rpc },
  fixtures: Fixtures,
): Operation {
  const { entities, hot } = fixtures;
  const randomEntity = () => entities[Math.floor(Math.random() * entities.length)]!;
  const pair = (): [string, string] => {
    const from = workload === "batch-hot" ? hot : randomEntity();
    let to = randomEntity();
    while (to === from) to = randomEntity();
    return [from, to];
  };
  return async () => {
    const pairs = Array.from({ length: BATCH_ITEMS }, pair);
    let failed: number;
    if (transport === "rest") {
      const res = await clients.rest.post<{ failed: number; results: Array<{ error?: { code: string } }> }>("/transaction/batch", {
        transactions: pairs.map(([from, to]) => ({ description: "bench", status: "posted", amount: 1, account: { from, to } })),
      });
      failed = res.failed;
      if (failed) throw new CallError(`item_${res.results.find((r) => r.error)?.error?.code ?? "error"}`);
    } else {
      const res = await clients.rpc.ledger.createTransactions({
        transactions: pairs.map(([from, to]) => ({
          transaction: {
            description: "bench",
            status: TransactionStatus.POSTED,
            form: { case: "transfer", value: { fromEntityId: from, toEntityId: to, amount: 1n } },
          },
        })),
      });
      failed = res.failed;
      if (failed) {
        const first = res.results.find((r) => r.result.case === "error")?.result.value as { code?: string } | undefined;
        throw new CallError(`item_${first?.code ?? "error"}`);
      }
    }
  };
}
