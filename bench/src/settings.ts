// The bench's command line: what to run, for how long, and at what concurrency.
import { parseArgs } from "node:util";
import { ACCOUNT_WORKLOADS, type AccountWorkloadName } from "./account-workloads.js";
import { BATCH_WORKLOADS, type BatchWorkloadName } from "./batch-workloads.js";
import { HISTORY_LEGS, HISTORY_WORKLOADS, type HistoryWorkloadName } from "./history-workloads.js";
import { SEARCH_GROUPS, SEARCH_VALUES, SEARCH_WORKLOADS, type SearchWorkloadName } from "./search-workload.js";
import { LAYOUTS, type Layout } from "./system.js";
import { WORKLOADS, type Transport, type WorkloadName } from "./workloads.js";

export const ALL_WORKLOADS = [...WORKLOADS, ...BATCH_WORKLOADS, ...HISTORY_WORKLOADS, ...SEARCH_WORKLOADS, ...ACCOUNT_WORKLOADS];

const USAGE = `usage: pnpm bench [--duration S] [--warmup S] [--concurrency 1,16,64] [--only LIST] [--transport rest,rpc] [--layout L] [--smoke]

  --duration S       measured seconds per workload, transport and concurrency (default 10)
  --warmup S         seconds before each measurement (default 2)
  --concurrency L    calls in flight (a closed loop), comma-separated (default 1,16,64)
  --only LIST        any of pgbench,${ALL_WORKLOADS.join(",")},webhooks (default all)
                     (batch and batch-hot run at concurrency 1,4,16; as-of, statement and
                     search at 1, whatever --concurrency says; accounts and accounts-one
                     over rpc in the processes layout only)
  --transport L      rest (wrk through the gateway), rpc (Connect's client straight to the
                     services), h2load (h2load straight to the ledger: transfer, deposit,
                     hot, as-of and statement only); any of them (default rest,rpc,h2load)
  --layout L         processes (four, as deployed), one-process (as npm start runs it), or both
                     (default processes,one-process; the drains and the webhook targets run in
                     the processes layout only)
  --pgbench-time S   pgbench -T (default the --duration, at least 5)
  --steady S         seconds of each steady webhook run, alone and beside the slow destination (default 20)
  --smoke            everything briefly, for CI: a few seconds in all; numbers mean nothing
Environment: BENCH_DATABASE_URL (default postgres://root@127.0.0.1:5432/ledger_bench, recreated
each run), NATS_URL (default nats://127.0.0.1:4222), PGBENCH and WRK (default pgbench and wrk on
PATH), BENCH_LOG_LEVEL (the services' LOG_LEVEL, default warn; info logs every delivery attempt).`;

export interface Settings {
  smoke: boolean;
  durationS: number;
  warmupS: number;
  concurrency: number[];
  workloads: Array<WorkloadName | BatchWorkloadName | HistoryWorkloadName | SearchWorkloadName | AccountWorkloadName>;
  transports: Transport[];
  layouts: Layout[];
  pgbench: boolean;
  pgbenchScale: number;
  pgbenchSeconds: number;
  webhooks: boolean;
  webhookRates: number[];
  webhookSeconds: number;
  /** Seconds of the steady run at half pgbench's TPS (once alone, once beside a slow destination). */
  webhookSteadySeconds: number;
  drainEvents: number;
  entities: number;
  /** Posted legs of the history workloads' entity. */
  historyLegs: number;
  /** Groups the search workload runs among. */
  searchGroups: number;
  /** How long to let the previous cell's events flow out before the next cell starts. */
  settleMs: number;
}

export function readSettings(argv: string[]): Settings {
  const { values } = parseArgs({
    args: argv,
    options: {
      duration: { type: "string" },
      warmup: { type: "string" },
      concurrency: { type: "string" },
      only: { type: "string" },
      transport: { type: "string" },
      layout: { type: "string" },
      "pgbench-time": { type: "string" },
      steady: { type: "string" },
      smoke: { type: "boolean", default: false },
      help: { type: "boolean", short: "h" },
    },
  });
  if (values.help) {
    console.log(USAGE);
    process.exit(0);
  }
  const smoke = values.smoke ?? false;
  const number = (raw: string | undefined, fallback: number, name: string) => {
    if (raw === undefined) return fallback;
    const n = Number(raw);
    if (!Number.isFinite(n) || n <= 0 || n > 3600) throw new Error(`--${name} must be a number of seconds above 0, got ${raw}\n\n${USAGE}`);
    return n;
  };
  const list = (raw: string | undefined, fallback: string[]) =>
    raw === undefined
      ? fallback
      : raw
          .split(",")
          .map((s) => s.trim())
          .filter(Boolean);
  const only = list(values.only, ["pgbench", ...ALL_WORKLOADS, "webhooks"]);
  const known = new Set<string>(["pgbench", ...ALL_WORKLOADS, "webhooks"]);
  const unknown = only.filter((o) => !known.has(o));
  if (unknown.length) throw new Error(`--only: unknown ${unknown.join(", ")}\n\n${USAGE}`);
  const concurrency = list(values.concurrency, smoke ? ["16"] : ["1", "16", "64"]).map(Number);
  if (concurrency.some((c) => !Number.isInteger(c) || c < 1 || c > 1024))
    throw new Error(`--concurrency must list integers 1 to 1024\n\n${USAGE}`);
  const transports = list(values.transport, ["rest", "rpc", "h2load"]);
  if (transports.some((t) => t !== "rest" && t !== "rpc" && t !== "h2load"))
    throw new Error(`--transport takes rest, rpc and/or h2load\n\n${USAGE}`);
  const layouts = list(values.layout, [...LAYOUTS]);
  if (layouts.length === 0 || layouts.some((l) => !(LAYOUTS as readonly string[]).includes(l)))
    throw new Error(`--layout takes ${LAYOUTS.join(" and/or ")}\n\n${USAGE}`);
  const durationS = number(values.duration, smoke ? 0.4 : 10, "duration");
  return {
    smoke,
    durationS,
    warmupS: number(values.warmup, smoke ? 0.1 : 2, "warmup"),
    concurrency,
    workloads: ALL_WORKLOADS.filter((w) => only.includes(w)),
    transports: transports as Transport[],
    layouts: LAYOUTS.filter((l) => layouts.includes(l)),
    pgbench: only.includes("pgbench"),
    pgbenchScale: smoke ? 1 : 10,
    pgbenchSeconds: Math.round(number(values["pgbench-time"], smoke ? 1 : Math.max(5, durationS), "pgbench-time")),
    webhooks: only.includes("webhooks"),
    webhookRates: [200],
    webhookSeconds: smoke ? 0.5 : 5,
    webhookSteadySeconds: number(values.steady, smoke ? 0.5 : 20, "steady"),
    drainEvents: smoke ? 100 : 10_000,
    entities: smoke ? 64 : 1000,
    historyLegs: smoke ? 5_000 : HISTORY_LEGS,
    searchGroups: smoke ? 10 * SEARCH_VALUES : SEARCH_GROUPS,
    settleMs: smoke ? 1_000 : 10_000,
  };
}
