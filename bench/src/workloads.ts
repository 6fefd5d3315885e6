// The five single-call workloads (bench/README.md), each sent through REST to the gateway
// (rest-load.lua makes the same bodies for wrk) and through RPC straight to the service (below,
// through Connect's client), doing the same money movement so the two can be compared.
import { Direction, TransactionStatus } from "@ledger/proto/ledger/v1/ledger_pb.js";
import type { Operation } from "./closed-loop.js";
import type { Rpc } from "./connect.js";

export const WORKLOADS = ["transfer", "deposit", "hot", "hold", "multileg"] as const;
export type WorkloadName = (typeof WORKLOADS)[number];
export type Transport = "rest" | "rpc" | "h2load";

/** What each workload does, for the report. */
export const WORKLOAD_DESCRIPTIONS: Record<WorkloadName, string> = {
  transfer: "posted two-party transfer between two random distinct pre-funded entities",
  deposit: "deposit (fund) into a random entity: every request debits the program's one external entity",
  hot: "posted transfer where every other request debits the same hot entity",
  hold: "hold, then in a later call capture all of it to another entity (a pair counts once; latency per call)",
  multileg: "posted multi-leg transaction of 10 legs (5 debits, 5 credits, distinct entities)",
};

/**
 * Entities every workload draws from. Each is funded far beyond what a run can spend (a run moves
 * a few units per request), so `insufficient_funds` must never happen: any error is a finding.
 */
export interface Fixtures {
  entities: string[];
  hot: string;
}

/** Money each entity starts with: enough for millions of 1-unit transfers. */
export const STARTING_BALANCE = 1_000_000_000_000n;

/** Creates `count` funded entities plus the hot one, over RPC, `parallel` at a time. */
export async function createFixtures(rpc: Rpc, count: number, parallel = 16): Promise<Fixtures> {
  const make = async (name: string) => {
    const { entity } = await rpc.ledger.createEntity({ entityName: name, entityType: "customer" });
    await rpc.ledger.fundEntity({ entityId: entity!.entityId, amount: STARTING_BALANCE, description: "bench seed" });
    return entity!.entityId;
  };
  const entities: string[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: parallel }, async () => {
      while (next < count) {
        const i = next++;
        entities[i] = await make(`bench ${i}`);
      }
    }),
  );
  return { entities, hot: await make("bench hot") };
}

/** `n` distinct random entities. */
function pick(entities: string[], n: number): string[] {
  const chosen = new Set<string>();
  // Bounded: entities outnumber n many times over, so this ends in a few draws.
  for (let tries = 0; chosen.size < n && tries < n * 100; tries++) {
    chosen.add(entities[Math.floor(Math.random() * entities.length)]!);
  }
  return [...chosen];
}

/** One RPC call of a workload. */
export function rpcOperation(workload: WorkloadName, rpc: Rpc, fixtures: Fixtures): Operation {
  const transfer = (from: string, to: string): Promise<unknown> =>
    rpc.ledger.createTransaction({
      description: "bench",
      status: TransactionStatus.POSTED,
      form: { case: "transfer", value: { fromEntityId: from, toEntityId: to, amount: 1n } },
    });
  switch (workload) {
    case "transfer":
      return async () => {
        const [from, to] = pick(fixtures.entities, 2) as [string, string];
        await transfer(from, to);
        return 1;
      };
    case "deposit":
      return async () => {
        const [to] = pick(fixtures.entities, 1) as [string];
        await rpc.ledger.fundEntity({ entityId: to, amount: 1n, description: "bench" });
        return 1;
      };
    case "hot": {
      // A shared counter, not a coin flip, so exactly every other request debits the hot entity.
      let n = 0;
      return async () => {
        const [a, b] = pick(fixtures.entities, 2) as [string, string];
        await transfer(n++ % 2 === 0 ? fixtures.hot : a, b);
        return 1;
      };
    }
    case "hold": {
      // Each worker alternates: a hold, then its capture; as wrk's connections do through REST.
      const held = new Map<number, { holdId: string; entityId: string }>();
      return async (worker) => {
        const pending = held.get(worker);
        if (!pending) {
          const [entityId] = pick(fixtures.entities, 1) as [string];
          const { hold } = await rpc.hold.createHold({ entityId, amount: 2n, description: "bench" });
          held.set(worker, { holdId: hold!.holdId, entityId });
          return 0;
        }
        held.delete(worker);
        let to = pending.entityId;
        while (to === pending.entityId) [to] = pick(fixtures.entities, 1) as [string];
        await rpc.hold.captureHold({ holdId: pending.holdId, amount: 2n, destinationEntityId: to });
        return 1;
      };
    }
    case "multileg":
      return async () => {
        const legs = pick(fixtures.entities, 10);
        await rpc.ledger.createTransaction({
          description: "bench",
          status: TransactionStatus.POSTED,
          form: {
            case: "entries",
            value: {
              entries: legs.map((entityId, i) => ({ entityId, direction: i < 5 ? Direction.DEBIT : Direction.CREDIT, amount: 2n })),
            },
          },
        });
        return 1;
      };
  }
}
