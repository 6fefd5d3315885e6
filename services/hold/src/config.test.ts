import { ConfigError } from "@ledger/common";
import { describe, expect, it } from "vitest";
import { readHoldConfig } from "./config.js";

describe("hold configuration", () => {
  it("takes a crash point outside production and names HOLD_CRASH_AT when it is bad", () => {
    expect(readHoldConfig({ HOLD_CRASH_AT: "after_ledger_reserve" }).crashAt).toBe("after_ledger_reserve");
    expect(readHoldConfig({}).crashAt).toBeUndefined();
    expect(() => readHoldConfig({ HOLD_CRASH_AT: "somewhere" })).toThrow(/HOLD_CRASH_AT/);
  });

  it("refuses crash injection in production: a set HOLD_CRASH_AT stops the start", () => {
    const production = { NODE_ENV: "production", SERVICE_TOKEN: "production-token-0123456789" };
    expect(readHoldConfig(production).crashAt).toBeUndefined();
    expect(() => readHoldConfig({ ...production, HOLD_CRASH_AT: "after_ledger_reserve" })).toThrow(ConfigError);
    expect(() => readHoldConfig({ ...production, HOLD_CRASH_AT: "after_ledger_reserve" })).toThrow(/HOLD_CRASH_AT/);
  });

  it("reads group commit settings with their defaults and refuses values out of range by name", () => {
    expect(readHoldConfig({})).toMatchObject({ batchMax: 64, batchConcurrency: 4, batchLingerMs: 1 });
    expect(readHoldConfig({ HOLD_BATCH_MAX: "8", HOLD_BATCH_CONCURRENCY: "2", HOLD_BATCH_LINGER_MS: "0" })).toMatchObject({
      batchMax: 8,
      batchConcurrency: 2,
      batchLingerMs: 0,
    });
    expect(() => readHoldConfig({ HOLD_BATCH_MAX: "0" })).toThrow(/HOLD_BATCH_MAX/);
    expect(() => readHoldConfig({ HOLD_BATCH_CONCURRENCY: "65" })).toThrow(/HOLD_BATCH_CONCURRENCY/);
    expect(() => readHoldConfig({ HOLD_BATCH_LINGER_MS: "-1" })).toThrow(/HOLD_BATCH_LINGER_MS/);
  });
});
