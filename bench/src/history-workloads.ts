// The history workloads: reads of one entity's long history (docs/api.md#balances-over-time), its
// balances as of a random moment and a full statement page of a random window, each sent at
// concurrency 1 through REST (rest-load.lua) and RPC (below). Their answer times must not grow with
// the history: each read is an index probe or range scan (docs/architecture.md#balance-history).
import { isoMicros, parseIsoTime } from "@ledger/common";
import { TransactionStatus } from "@ledger/proto/ledger/v1/ledger_pb.js";
import type { Operation } from "./closed-loop.js";
import { CallError, type Rpc } from "./connect.js";
import { STARTING_BALANCE, type Fixtures } from "./workloads.js";

export const HISTORY_WORKLOADS = ["as-of", "statement"] as const;
export type HistoryWorkloadName = (typeof HISTORY_WORKLOADS)[number];

/** Posted legs on the history entity before its reads are measured. */
export const HISTORY_LEGS = 100_000;

/** Entries in each statement page read. */
export const STATEMENT_PAGE = 1_000;

/** The concurrency the history workloads run at, whatever --concurrency says: one reader's latency. */
export const HISTORY_CONCURRENCY = [1];

export const HISTORY_WORKLOAD_DESCRIPTIONS: Record<HistoryWorkloadName, string> = {
  "as-of": `GET /entity?as_of= of an entity with ${HISTORY_LEGS} posted legs, at a random moment of its history`,
  statement: `GET /entity/statement page of ${STATEMENT_PAGE} entries of that entity, in a random window of its history`,
};

export function isHistoryWorkload(name: string): name is HistoryWorkloadName {
  return (HISTORY_WORKLOADS as readonly string[]).includes(name);
}

/** The entity whose history the reads go through, and the moment of each of its posted legs, oldest first. */
export interface HistoryFixture {
  entityId: string;
  /** posted_at of every posted leg, oldest first, to the microsecond (ISO 8601). */
  moments: string[];
}

/** Transfers per seeding call, and seeding calls in flight. */
const SEED_BATCH = 100;
const SEED_PARALLEL = 4;

/**
 * An entity with `legs` posted legs (its deposit, then transfers of 1 to the funded entities, 100
 * a call through CreateTransactions, so the legs span about a thousand writes), and the moment of
 * each, read back through its own statement.
 */
export async function seedHistory(rpc: Rpc, fixtures: Fixtures, legs = HISTORY_LEGS): Promise<HistoryFixture> {
  const { entity } = await rpc.ledger.createEntity({ entityName: "bench history", entityType: "customer" });
  const entityId = entity!.entityId;
  await rpc.ledger.fundEntity({ entityId, amount: STARTING_BALANCE, description: "bench seed" });
  let calls = Math.ceil((legs - 1) / SEED_BATCH);
  await Promise.all(
    Array.from({ length: SEED_PARALLEL }, async () => {
      while (calls-- > 0) {
        const res = await rpc.ledger.createTransactions({
          transactions: Array.from({ length: SEED_BATCH }, (_, i) => ({
            transaction: {
              description: "bench history",
              status: TransactionStatus.POSTED,
              form: {
                case: "transfer" as const,
                value: { fromEntityId: entityId, toEntityId: fixtures.entities[i % fixtures.entities.length]!, amount: 1n },
              },
            },
          })),
        });
        if (res.failed) throw new Error(`seeding the history entity: ${res.failed} transfers refused`);
      }
    }),
  );
  const moments: string[] = [];
  const from = parseIsoTime("2000-01-01T00:00:00Z")!;
  const to = parseIsoTime(new Date(Date.now() + 3_600_000).toISOString())!;
  let cursor = "";
  do {
    const page = await rpc.ledger.getEntityStatement({ entityId, from, to, limit: STATEMENT_PAGE, cursor });
    for (const entry of page.entries) moments.push(isoMicros(entry.postedAt!));
    cursor = page.page?.hasNext ? page.page.nextCursor : "";
  } while (cursor);
  return { entityId, moments };
}

/** A random moment of the history, and a window from a random leg holding at least STATEMENT_PAGE legs. */
export function historyRequests(history: HistoryFixture) {
  const { moments } = history;
  const at = (i: number) => parseIsoTime(moments[i]!)!;
  return {
    asOf: () => at(Math.floor(Math.random() * moments.length)),
    // Twice the page: a window starts at a write's stamp, and up to a few hundred legs share one.
    window: () => {
      const start = Math.floor(Math.random() * (moments.length - 2 * STATEMENT_PAGE));
      return { from: at(start), to: at(start + 2 * STATEMENT_PAGE) };
    },
  };
}

/** One RPC call of a history workload; a statement page short of STATEMENT_PAGE entries is an error. */
export function rpcHistoryOperation(workload: HistoryWorkloadName, rpc: Rpc, history: HistoryFixture): Operation {
  const requests = historyRequests(history);
  if (workload === "as-of") {
    return async () => {
      await rpc.ledger.getEntity({ entityId: history.entityId, asOf: requests.asOf() });
      return 1;
    };
  }
  return async () => {
    const page = await rpc.ledger.getEntityStatement(
      Object.assign({ entityId: history.entityId, limit: STATEMENT_PAGE }, requests.window()),
    );
    if (page.entries.length !== STATEMENT_PAGE) throw new CallError("short_statement_page");
    return 1;
  };
}
