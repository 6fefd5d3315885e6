// The history reads' reference: the SQL the ledger sends for an as-of read and for a statement page
// (history-as-of.sql, history-statement.sql), alone, through pgbench at concurrency 1 on the
// layout's database once its history entity is seeded. Each read's p99 at concurrency 1 is then
// shown beside this machine's own tail for the same statements, as the c=16 p99 is beside pgbench -N.
import { fileURLToPath } from "node:url";
import { parseIsoTime, requireMoment } from "@ledger/common";
import { percentile } from "./closed-loop.js";
import { STATEMENT_PAGE, type HistoryWorkloadName } from "./history-workloads.js";
import { connectionArgs, runLogged } from "./pgbench.js";

/** One history read's SQL through pgbench at concurrency 1: its transactions and their latency. */
export interface HistoryReference {
  transactions: number;
  p50Ms: number;
  p99Ms: number;
}

/** The history entity, as its reads name it. */
export interface HistoryEntity {
  entityId: string;
  accountId: string;
  programId: string;
}

const SCRIPTS: Record<HistoryWorkloadName, string> = {
  "as-of": fileURLToPath(new URL("./history-as-of.sql", import.meta.url)),
  statement: fileURLToPath(new URL("./history-statement.sql", import.meta.url)),
};

/**
 * The scripts' variables (pgbench `-D`): the entity, and the moments their reads draw from, in
 * microseconds since the epoch. `moments` are the posted moments of the entity's legs, oldest first.
 */
export function historyReferenceVariables(entity: HistoryEntity, moments: readonly string[]): Record<string, string> {
  // A statement window starts at the latest two pages before the last leg, as historyRequests' do.
  const lastStart = moments.length - 2 * STATEMENT_PAGE - 1;
  if (lastStart < 0) throw new Error(`a statement page's reference needs more than ${2 * STATEMENT_PAGE} legs, not ${moments.length}`);
  const micros = (i: number) => requireMoment(parseIsoTime(moments[i]!), "moment").toString();
  return {
    account: entity.accountId,
    program: entity.programId,
    entity: entity.entityId,
    first_us: micros(0),
    last_from_us: micros(lastStart),
    last_us: micros(moments.length - 1),
    page_limit: String(STATEMENT_PAGE + 1),
  };
}

/**
 * For each workload, `pgbench -n -c 1 -j 1 -T <seconds> -M prepared -f <its script> -l` on the
 * database of `databaseUrl`, read from its per-transaction log.
 */
export async function runHistoryReference(options: {
  databaseUrl: string;
  entity: HistoryEntity;
  moments: readonly string[];
  workloads: readonly HistoryWorkloadName[];
  seconds: number;
}): Promise<Partial<Record<HistoryWorkloadName, HistoryReference>>> {
  const url = new URL(options.databaseUrl);
  const database = decodeURIComponent(url.pathname.slice(1));
  const variables = Object.entries(historyReferenceVariables(options.entity, options.moments)).flatMap(([name, value]) => [
    "-D",
    `${name}=${value}`,
  ]);
  // The ledger's connections run with JIT off (openDatabase in packages/common/src/db.ts), and so
  // do these: this server may have it on, and a page's plan can cost enough to be compiled.
  const env = { ...process.env, PGOPTIONS: `${process.env["PGOPTIONS"] ?? ""} -c jit=off`.trim() };
  const results: Partial<Record<HistoryWorkloadName, HistoryReference>> = {};
  for (const workload of options.workloads) {
    const args = ["-n", "-c", "1", "-j", "1", "-T", String(options.seconds), "-M", "prepared", "-f", SCRIPTS[workload]];
    const { latenciesMs } = await runLogged([...args, ...variables, ...connectionArgs(url)], database, env);
    results[workload] = {
      transactions: latenciesMs.length,
      p50Ms: percentile(latenciesMs, 0.5),
      p99Ms: percentile(latenciesMs, 0.99),
    };
  }
  return results;
}
