import { describe, expect, it } from "vitest";
import { createGroupScheduler, type Queued } from "./group-commit.js";

interface Job extends Queued {
  name: string;
}

const job = (name: string, keys: string[] = [], size = 1): Job => ({ name, keys, size, queuedAt: performance.now() });

/** A scheduler whose transactions end when the test says so; `runs` lists each one's jobs. */
function scheduler(options: { maxBatch?: number; maxInFlight?: number; lingerMs?: number; halfAbove?: number } = {}) {
  const runs: string[][] = [];
  const finishers: Array<() => void> = [];
  const s = createGroupScheduler<Job>({
    maxBatch: options.maxBatch ?? 100,
    maxInFlight: options.maxInFlight ?? 4,
    lingerMs: options.lingerMs ?? 50,
    ...(options.halfAbove !== undefined ? { halfAbove: options.halfAbove } : {}),
    run: (jobs) => {
      runs.push(jobs.map((j) => j.name));
      return new Promise<void>((resolve) => finishers.push(resolve));
    },
  });
  return { s, runs, finishers };
}

const turn = () => new Promise((resolve) => setImmediate(resolve));

describe("group-commit scheduler", () => {
  it("puts the pieces queued in one turn of the event loop in one transaction, with nothing in flight", async () => {
    const { s, runs } = scheduler();
    for (const name of ["a", "b", "c", "d", "e"]) s.enqueue(job(name));
    expect(runs).toEqual([]);
    await turn();
    expect(runs).toEqual([["a", "b", "c", "d", "e"]]);
  });

  it("starts a lone piece at the end of its turn, without waiting out the linger", async () => {
    const { s, runs } = scheduler({ lingerMs: 10_000 });
    s.enqueue(job("alone"));
    await turn();
    expect(runs).toEqual([["alone"]]);
  });

  it("while a transaction is in flight, lets the next one linger for company, then takes all that came", async () => {
    const { s, runs, finishers } = scheduler({ lingerMs: 30 });
    s.enqueue(job("first"));
    await turn();
    s.enqueue(job("second"));
    await turn();
    s.enqueue(job("third"));
    await turn();
    expect(runs).toEqual([["first"]]);
    await new Promise((resolve) => setTimeout(resolve, 60));
    expect(runs).toEqual([["first"], ["second", "third"]]);
    for (const finish of finishers) finish();
  });

  it("keeps pieces that share a key apart, and a piece larger than the budget alone", async () => {
    const { s, runs, finishers } = scheduler({ maxBatch: 10, lingerMs: 0 });
    s.enqueue(job("k1", ["k"]));
    s.enqueue(job("k2", ["k"]));
    s.enqueue(job("big", [], 25));
    s.enqueue(job("small"));
    await turn();
    expect(runs[0]).toEqual(["k1", "small"]);
    expect(runs.flat().sort()).toEqual(["big", "k1", "k2", "small"]);
    expect(runs.find((r) => r.includes("big"))).toEqual(["big"]);
    for (const finish of finishers) finish();
  });

  const names = (prefix: string, n: number) => Array.from({ length: n }, (_, i) => `${prefix}${i}`);

  it("with more than `halfAbove` outstanding, gives one transaction half and the next one the rest, in turn", async () => {
    const { s, runs, finishers } = scheduler({ halfAbove: 4, lingerMs: 0 });
    for (const name of names("a", 12)) s.enqueue(job(name));
    await turn();
    // 12 outstanding: the first takes 6; with those in flight, 12 are still outstanding, so the next takes the other 6.
    expect(runs).toEqual([names("a", 12).slice(0, 6), names("a", 12).slice(6)]);
    finishers[0]!();
    await turn();
    // The first one's callers come back while the second is in flight: they go together, as one half.
    for (const name of names("b", 6)) s.enqueue(job(name));
    await turn();
    expect(runs[2]).toEqual(names("b", 6));
    for (const finish of finishers) finish();
  });

  it("never gives a transaction less than `halfAbove`, so a few callers still go together", async () => {
    const { s, runs, finishers } = scheduler({ halfAbove: 8, lingerMs: 30 });
    for (const name of names("a", 10)) s.enqueue(job(name));
    await turn();
    // Half of 10 is 5, below the floor: the first takes 8, and the last 2 linger for company.
    expect(runs).toEqual([names("a", 10).slice(0, 8)]);
    await new Promise((resolve) => setTimeout(resolve, 60));
    expect(runs).toEqual([names("a", 10).slice(0, 8), names("a", 10).slice(8)]);
    for (const finish of finishers) finish();
  });

  it("without `halfAbove`, or with it 0 (LEDGER_BATCH_HALF_ABOVE=0), one transaction takes every queued piece", async () => {
    for (const options of [{}, { halfAbove: 0 }]) {
      const { s, runs, finishers } = scheduler(options);
      for (const name of names("a", 64)) s.enqueue(job(name));
      await turn();
      expect(runs).toEqual([names("a", 64)]);
      for (const finish of finishers) finish();
    }
  });
});
