import { describe, expect, it } from "vitest";
import { type Cell, type Report, runtimeTargets, toMarkdown } from "./report.js";

// The runtime targets are read off every full run; a wrong comparison would report a target met
// that is not, so each bound is checked on both sides of its limit.

function transferCell(transport: Cell["transport"], concurrency: number, perSecond: number, p99: number): Cell {
  const cpu = { ledger: 50, hold: 50, notification: 50, gateway: 50, postgres: 50, nats: 10, bench: 20 };
  return {
    layout: "one-process",
    workload: "transfer",
    transport,
    concurrency,
    ok: perSecond * 10,
    itemsPerCall: 1,
    perSecond,
    ratio: perSecond / 4000,
    p50: p99 / 2,
    p95: p99 * 0.8,
    p99,
    max: p99 * 1.5,
    errors: {},
    rssMb: { ledger: 110, hold: 110, notification: 110, gateway: 110 },
    cpu,
    backlogAfter: 0,
    eventsStoredPerSecond: perSecond,
    drainedMs: 0,
  };
}

/** A 100-transfer batch cell of `npm start`'s one process. */
function batchCell(transport: "rest" | "rpc", concurrency: number, perSecond: number): Cell {
  return Object.assign(transferCell(transport, concurrency, perSecond, 300), {
    workload: "batch" as const,
    itemsPerCall: 100,
    ok: perSecond / 10,
  });
}

function report(cells: Cell[], peaks: Report["peakRssMb"]): Report {
  return {
    date: "2026-11-25T00:00:00.000Z",
    smoke: false,
    machine: { cpu: "test", cores: 2, memoryGb: 24, kernel: "6", node: "v20", postgres: "15", nats: "2.9" },
    settings: { warmupS: 2, durationS: 10, concurrency: [16, 64], entities: 1000, perCellPeakRss: true, layouts: ["one-process"] },
    pgbench: { tps: 4000, latencyMs: 8, scale: 10, clients: 32, seconds: 10 },
    cells,
    webhooks: [],
    drains: [],
    peakRssMb: peaks,
    invariants: { ok: true, violations: [] },
    unexpectedErrors: [],
    ok: true,
  };
}

const apart = { ledger: 119, hold: 107, notification: 116, gateway: 103 };
const onePeak = (mb: number) => ({ ledger: mb, hold: mb, notification: mb, gateway: mb });

describe("runtimeTargets", () => {
  it("judges each target against pgbench's TPS and its own bound", () => {
    const cells = [
      transferCell("rest", 64, 2400, 30), // 0.6x: met
      transferCell("rpc", 64, 3196, 30), // 0.799x: not met
      transferCell("rest", 16, 2000, 24.9),
      transferCell("rpc", 16, 2000, 25),
      batchCell("rest", 1, 5200),
      batchCell("rest", 4, 5600), // 1.4x: the best REST cell, met
      batchCell("rpc", 1, 5596), // 1.399x: the best RPC cell, not met
      batchCell("rpc", 16, 4000),
    ];
    const rows = runtimeTargets(report(cells, { processes: apart, "one-process": onePeak(200.004) }));
    expect(rows.map((r) => [r.target, r.met])).toEqual([
      ["REST at concurrency 64", true],
      ["RPC (binary, HTTP/2, straight to the ledger) at concurrency 64", false],
      ["p99 at concurrency 16", false],
      ["batches of 100 transfers, the best concurrency of each transport", false],
      ["peak RSS of each process apart, over the run", true],
      ["peak RSS of the one process, over the run", false],
    ]);
    expect(rows[1]!.measured).toBe("Connect's client: 3196/s = 0.80x pgbench");
    expect(rows[2]!.measured).toBe("REST 24.9 ms, RPC (Connect's client) 25.0 ms");
    expect(rows[3]!.measured).toBe("REST 5600/s = 1.40x (c=4), RPC 5596/s = 1.40x (c=1)");
    expect(rows[4]!.measured).toContain("119.0 MB (ledger 119.0, hold 107.0, notification 116.0, gateway 103.0)");
  });

  it("meets the bounds just inside them", () => {
    const cells = [
      transferCell("rpc", 64, 3200, 30),
      transferCell("rpc", 16, 2000, 24.9),
      batchCell("rest", 16, 5600),
      batchCell("rpc", 4, 5600),
    ];
    const rows = runtimeTargets(report(cells, { processes: Object.assign({}, apart, { ledger: 150 }), "one-process": onePeak(200) }));
    expect(rows.every((r) => r.met)).toBe(true);
    expect(rows.map((r) => r.target)).toEqual([
      "RPC (binary, HTTP/2, straight to the ledger) at concurrency 64",
      "p99 at concurrency 16",
      "batches of 100 transfers, the best concurrency of each transport",
      "peak RSS of each process apart, over the run",
      "peak RSS of the one process, over the run",
    ]);
  });

  it("judges RPC on h2load's cells when the run has them, Connect's client's shown beside", () => {
    const cells = [
      transferCell("rpc", 64, 1600, 30), // 0.4x: the client's own CPU, not the server
      transferCell("h2load", 64, 3400, 30), // 0.85x
      transferCell("rest", 16, 2000, 20),
      transferCell("h2load", 16, 2000, 12),
      transferCell("rpc", 16, 1000, 40),
    ];
    const rows = runtimeTargets(report(cells, {}));
    expect(rows[0]).toMatchObject({
      target: "RPC (binary, HTTP/2, straight to the ledger) at concurrency 64",
      measured: "h2load: 3400/s = 0.85x pgbench; Connect's client: 1600/s = 0.40x pgbench",
      met: true,
    });
    expect(rows[1]).toMatchObject({
      measured: "REST 20.0 ms, RPC (h2load) 12.0 ms, RPC (Connect's client) 40.0 ms",
      met: true,
    });
    const slow = runtimeTargets(report([transferCell("h2load", 64, 3000, 30), transferCell("rpc", 64, 3600, 30)], {}));
    expect(slow[0]!.met).toBe(false);
  });

  it("misses the memory bounds when a peak passes them", () => {
    const rows = runtimeTargets(
      report([], { processes: Object.assign({}, apart, { notification: 150.01 }), "one-process": onePeak(200.01) }),
    );
    expect(rows.map((r) => r.met)).toEqual([false, false]);
  });

  it("does not count batches met with a transport not measured, or a batch cell with errors", () => {
    const one = runtimeTargets(report([batchCell("rest", 4, 9000)], {}));
    expect(one).toEqual([expect.objectContaining({ measured: "REST 9000/s = 2.25x (c=4)", met: false })]);
    const failing = Object.assign(batchCell("rpc", 4, 9000), { errors: { item_insufficient_funds: 1 } });
    expect(runtimeTargets(report([batchCell("rest", 4, 9000), failing], {}))[0]!.met).toBe(false);
  });

  it("does not count a cell with errors as meeting its ratio", () => {
    const cell = Object.assign(transferCell("rest", 64, 3000, 30), { errors: { unavailable: 3 } });
    expect(runtimeTargets(report([cell], {}))[0]).toMatchObject({ target: "REST at concurrency 64", met: false });
  });

  it("shows pgbench's own tail at concurrency 16 beside the p99 target, when the run measured it", () => {
    const r = report([transferCell("rest", 16, 2000, 24.9)], {});
    r.pgbench!.tail = { clients: 16, tps: 2343, transactions: 23138, p50Ms: 5.74, p99Ms: 21.37 };
    expect(runtimeTargets(r)[0]!.measured).toBe("REST 24.9 ms (pgbench -N at c=16: 21.4 ms)");
    expect(toMarkdown(r)).toContain("(simple-update script `-N`, no hot row, 16 clients): 2343 TPS, p50 5.7 ms, **p99 21.4 ms**.");
  });

  it("shows the history reads' SQL alone through pgbench beside their targets, judged on the ledger's p99 alone", () => {
    const statement = (layout: Cell["layout"], p99: number): Cell =>
      Object.assign(transferCell("rpc", 1, 100, p99), { layout, workload: "statement" as const });
    const r = report([statement("processes", 19.9), statement("one-process", 21.6)], {});
    const asOf = { transactions: 9000, p50Ms: 0.42, p99Ms: 1.01 };
    r.historyReference = {
      processes: { statement: { transactions: 700, p50Ms: 6.71, p99Ms: 20.04 } },
      "one-process": { "as-of": asOf, statement: { transactions: 650, p50Ms: 6.9, p99Ms: 8.5 } },
    };
    expect(runtimeTargets(r)).toEqual([
      {
        target: "a statement page of 1000 entries of a long history, p99 at concurrency 1",
        measured:
          "processes RPC (Connect's client) 19.9 ms, one-process RPC (Connect's client) 21.6 ms (the same SQL alone through pgbench at c=1: processes p99 20.0 ms, one-process p99 8.5 ms)",
        goal: "< 20 ms",
        met: false,
      },
    ]);
    expect(toMarkdown(r)).toContain(
      "- processes: statement p50 6.7 ms, p99 20.0 ms (700 reads)\n" +
        "- one-process: as-of p50 0.4 ms, p99 1.0 ms (9000 reads); statement p50 6.9 ms, p99 8.5 ms (650 reads)\n",
    );
    r.cells = [statement("one-process", 19.9)];
    expect(runtimeTargets(r)[0]!.met).toBe(true);
    delete r.historyReference;
    expect(runtimeTargets(r)[0]!.measured).toBe("one-process RPC (Connect's client) 19.9 ms");
    expect(toMarkdown(r)).not.toContain("History reads as SQL alone");
  });

  it("judges a history read over RPC on h2load's cell where the layout has one, and on Connect's client's where not", () => {
    const statement = (layout: Cell["layout"], transport: Cell["transport"], p99: number): Cell =>
      Object.assign(transferCell(transport, 1, 60, p99), { layout, workload: "statement" as const });
    const r = report(
      [statement("processes", "h2load", 14.2), statement("processes", "rpc", 37.3), statement("processes", "rest", 19.5)],
      {},
    );
    expect(runtimeTargets(r)[0]).toMatchObject({
      measured: "processes RPC (h2load) 14.2 ms, processes RPC (Connect's client) 37.3 ms (not judged), processes REST 19.5 ms",
      met: true,
    });
    // Connect's client still counts in a layout h2load did not measure, and h2load's own tail always does.
    r.cells.push(statement("one-process", "rpc", 21.0));
    expect(runtimeTargets(r)[0]!.met).toBe(false);
    r.cells = [statement("processes", "h2load", 20.5), statement("processes", "rpc", 12.0)];
    expect(runtimeTargets(r)[0]!.met).toBe(false);
  });

  it("leaves out what the run did not measure, and the report shows the table only when there is one", () => {
    expect(runtimeTargets(report([], {}))).toEqual([]);
    expect(toMarkdown(report([], {}))).not.toContain("Runtime targets");
    expect(toMarkdown(report([transferCell("rpc", 64, 3600, 30)], {}))).toContain(
      "| RPC (binary, HTTP/2, straight to the ledger) at concurrency 64 | Connect's client: 3600/s = 0.90x pgbench | ≥ 0.8x pgbench TPS | yes |",
    );
  });
  it("judges the one process on the pgbench run right before its layout, and shows how the reference moved", () => {
    const r = report([transferCell("h2load", 64, 2600, 30), batchCell("rpc", 16, 4300)], {});
    // The opening run (4,000 TPS) was before the processes layout; the machine then slowed.
    r.pgbenchByLayout = { "one-process": { tps: 3000, latencyMs: 10, scale: 10, clients: 32, seconds: 10 } };
    r.pgbenchClosing = { tps: 2800, latencyMs: 11, scale: 10, clients: 32, seconds: 10 };
    const rows = runtimeTargets(r);
    // 2,600/3,000 = 0.87x (against the opening run it would be 0.65x, not met); 4,300/3,000 = 1.43x.
    expect(rows[0]).toMatchObject({ measured: "h2load: 2600/s = 0.87x pgbench", met: true });
    expect(rows[1]).toMatchObject({ measured: "RPC 4300/s = 1.43x (c=16)", met: false }); // REST batches not measured
    expect(toMarkdown(r)).toContain(
      "**The reference over the run** (each layout's `x pgbench` divides by the TPC-B run right before it, the opening one for the first): " +
        "before one-process 3000 TPS (75% of the opening), after the last layout 2800 TPS (70% of the opening).",
    );
  });
});
