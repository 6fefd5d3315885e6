import { describe, expect, it } from "vitest";
import { createGroupScheduler, type Queued } from "./group-commit.js";

interface Job extends Queued {
  name: string;
}

const job = (name: string, keys: string[] = [], size = 1): Job => ({ name, keys, size, queuedAt: performance.now() });

/** A scheduler whose transactions end when the test says so; `runs` lists each one's jobs. */
function scheduler(options: { maxBatch?: number; maxInFlight?: number; lingerMs?: number } = {}) {
  const runs: string[][] = [];
  const finishers: Array<() => void> = [];
  const s = createGroupScheduler<Job>({
    maxBatch: options.maxBatch ?? 100,
    maxInFlight: options.maxInFlight ?? 4,
    lingerMs: options.lingerMs ?? 50,
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
});
