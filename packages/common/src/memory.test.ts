import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { describe, expect, it } from "vitest";
import { ConfigError } from "./config.js";
import {
  applyMemorySettings,
  boundHeapGrowth,
  DEFAULT_HEAP_GROWING_PERCENT,
  growthWithinBudget,
  ONE_PROCESS_HEAP_GROWING_PERCENT,
  oldGenerationUsed,
  ONE_PROCESS_OLD_GENERATION_BUDGET_MB,
  readHeapGrowingPercent,
} from "./memory.js";

describe("HEAP_GROWING_PERCENT", () => {
  it("defaults to 25, takes 0 (V8's own rule) to 1000, and refuses anything else naming the variable", () => {
    expect(DEFAULT_HEAP_GROWING_PERCENT).toBe(25);
    expect(readHeapGrowingPercent({})).toBe(25);
    expect(readHeapGrowingPercent({ HEAP_GROWING_PERCENT: "" })).toBe(25);
    expect(readHeapGrowingPercent({ HEAP_GROWING_PERCENT: "0" })).toBe(0);
    expect(readHeapGrowingPercent({ HEAP_GROWING_PERCENT: "50" })).toBe(50);
    expect(readHeapGrowingPercent({ HEAP_GROWING_PERCENT: "1000" })).toBe(1000);
    for (const bad of ["-1", "1001", "25%", "1.5", "lots"]) {
      expect(() => readHeapGrowingPercent({ HEAP_GROWING_PERCENT: bad }), bad).toThrow(ConfigError);
      expect(() => readHeapGrowingPercent({ HEAP_GROWING_PERCENT: bad }), bad).toThrow(/HEAP_GROWING_PERCENT/);
    }
  });

  it("sets V8's flag unless it is 0 or node was given its own, and refuses a bad value before setting anything", () => {
    // The flag stays set in this test worker's V8, where it only changes how far its heap grows.
    expect(applyMemorySettings({}, [])).toEqual({ percent: 25 });
    expect(applyMemorySettings({ HEAP_GROWING_PERCENT: "40" }, [])).toEqual({ percent: 40 });
    expect(applyMemorySettings({ HEAP_GROWING_PERCENT: "0" }, [])).toBeUndefined();
    expect(applyMemorySettings({ HEAP_GROWING_PERCENT: "40" }, ["--heap-growing-percent=60"])).toBeUndefined();
    expect(applyMemorySettings({}, ["--heap_growing_percent", "60"])).toBeUndefined();
    expect(() => applyMemorySettings({ HEAP_GROWING_PERCENT: "x" }, [])).toThrow(/HEAP_GROWING_PERCENT/);
  });

  it("takes a process's own default, which the variable and node's flag still override", () => {
    expect(ONE_PROCESS_HEAP_GROWING_PERCENT).toBe(100);
    expect(readHeapGrowingPercent({}, 100)).toBe(100);
    expect(readHeapGrowingPercent({ HEAP_GROWING_PERCENT: "40" }, 100)).toBe(40);
    expect(applyMemorySettings({}, [], { percent: 100 })).toEqual({ percent: 100 });
    expect(applyMemorySettings({ HEAP_GROWING_PERCENT: "0" }, [], { percent: 100 })).toBeUndefined();
    expect(applyMemorySettings({}, ["--heap-growing-percent=60"], { percent: 100 })).toBeUndefined();
    // The flag stays set in this worker's V8: put the suite's value back.
    applyMemorySettings({}, []);
  });

  it("bounds a process's growth by its budget unless the variable or node's flag fixes it", () => {
    expect(ONE_PROCESS_OLD_GENERATION_BUDGET_MB).toBe(48);
    const budgeted = { percent: 100, budgetMb: 48 };
    expect(applyMemorySettings({}, [], budgeted)).toEqual(budgeted);
    expect(applyMemorySettings({ HEAP_GROWING_PERCENT: "40" }, [], budgeted)).toEqual({ percent: 40 });
    expect(applyMemorySettings({}, ["--heap-growing-percent=60"], budgeted)).toBeUndefined();
    applyMemorySettings({}, []);
  });
});

describe("the old generation's budget", () => {
  it("grows by the most while that fits, by less as the live data grows, never below the least", () => {
    const mb = 1024 * 1024;
    expect(growthWithinBudget(48 * mb, 20 * mb, 25, 100)).toBe(100);
    expect(growthWithinBudget(48 * mb, 24 * mb, 25, 100)).toBe(100);
    expect(growthWithinBudget(48 * mb, 30 * mb, 25, 100)).toBe(60);
    expect(growthWithinBudget(48 * mb, 36 * mb, 25, 100)).toBe(33);
    expect(growthWithinBudget(48 * mb, 40 * mb, 25, 100)).toBe(25);
    expect(growthWithinBudget(48 * mb, 90 * mb, 25, 100)).toBe(25);
    expect(growthWithinBudget(48 * mb, 0, 25, 100)).toBe(100);
  });

  it("follows what survives each full collection: less growth while live data fills the budget, the most again once it is gone", async () => {
    setFlagsFromString("--expose-gc");
    const gc = runInNewContext("gc") as () => void;
    const delivered = () => new Promise((resolve) => setTimeout(resolve, 50));
    gc();
    // A budget 40 MB above what this worker holds now: the most growth fits.
    const budgetMb = Math.ceil(oldGenerationUsed() / (1024 * 1024)) + 40;
    const bound = boundHeapGrowth(100, budgetMb, 25);
    try {
      gc();
      await delivered();
      expect(bound.percent()).toBe(100);
      // 40 MB more that survives: the budget is full, the growth at its least.
      // 10,240 arrays of 1,024 small integers, 4 bytes each (compressed pointers): 40 MB.
      let held: number[][] | undefined = Array.from({ length: 10 * 1024 }, (_, i) => new Array<number>(1024).fill(i));
      gc();
      await delivered();
      expect(held.length).toBe(10 * 1024);
      expect(bound.percent()).toBe(25);
      held = undefined;
      gc();
      await delivered();
      expect(bound.percent()).toBe(100);
    } finally {
      bound.close();
      applyMemorySettings({}, []);
    }
  });
});
