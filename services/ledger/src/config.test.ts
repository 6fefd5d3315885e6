import { describe, expect, it } from "vitest";
import { ONE_PROCESS_BATCH_MAX, readLedgerConfig } from "./config.js";

describe("ledger configuration", () => {
  it("takes at most 1,000 commands a transaction unless a process's own default or LEDGER_BATCH_MAX says otherwise", () => {
    expect(readLedgerConfig({}).batchMax).toBe(1_000);
    expect(ONE_PROCESS_BATCH_MAX).toBe(300);
    expect(readLedgerConfig({}, { batchMax: ONE_PROCESS_BATCH_MAX }).batchMax).toBe(300);
    expect(readLedgerConfig({ LEDGER_BATCH_MAX: "800" }, { batchMax: ONE_PROCESS_BATCH_MAX }).batchMax).toBe(800);
    expect(() => readLedgerConfig({ LEDGER_BATCH_MAX: "1001" })).toThrow(/LEDGER_BATCH_MAX/);
  });
});
