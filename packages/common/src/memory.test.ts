import { describe, expect, it } from "vitest";
import { ConfigError } from "./config.js";
import { applyMemorySettings, DEFAULT_HEAP_GROWING_PERCENT, ONE_PROCESS_HEAP_GROWING_PERCENT, readHeapGrowingPercent } from "./memory.js";

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
    expect(applyMemorySettings({}, [])).toBe(25);
    expect(applyMemorySettings({ HEAP_GROWING_PERCENT: "40" }, [])).toBe(40);
    expect(applyMemorySettings({ HEAP_GROWING_PERCENT: "0" }, [])).toBeUndefined();
    expect(applyMemorySettings({ HEAP_GROWING_PERCENT: "40" }, ["--heap-growing-percent=60"])).toBeUndefined();
    expect(applyMemorySettings({}, ["--heap_growing_percent", "60"])).toBeUndefined();
    expect(() => applyMemorySettings({ HEAP_GROWING_PERCENT: "x" }, [])).toThrow(/HEAP_GROWING_PERCENT/);
  });

  it("takes a process's own default, which the variable and node's flag still override", () => {
    expect(ONE_PROCESS_HEAP_GROWING_PERCENT).toBe(100);
    expect(readHeapGrowingPercent({}, 100)).toBe(100);
    expect(readHeapGrowingPercent({ HEAP_GROWING_PERCENT: "40" }, 100)).toBe(40);
    expect(applyMemorySettings({}, [], 100)).toBe(100);
    expect(applyMemorySettings({ HEAP_GROWING_PERCENT: "0" }, [], 100)).toBeUndefined();
    expect(applyMemorySettings({}, ["--heap-growing-percent=60"], 100)).toBeUndefined();
    // The flag stays set in this worker's V8: put the suite's value back.
    applyMemorySettings({}, []);
  });
});
