import { describe, expect, it } from "vitest";
import { DEFAULT_BATCH_MAX, readLedgerConfig } from "./config.js";

describe("ledger configuration", () => {
  it("takes at most 300 commands a transaction unless LEDGER_BATCH_MAX says otherwise, up to 1,000", () => {
    expect(DEFAULT_BATCH_MAX).toBe(300);
    expect(readLedgerConfig({}).batchMax).toBe(300);
    expect(readLedgerConfig({ LEDGER_BATCH_MAX: "800" }).batchMax).toBe(800);
    expect(() => readLedgerConfig({ LEDGER_BATCH_MAX: "1001" })).toThrow(/LEDGER_BATCH_MAX/);
    expect(() => readLedgerConfig({ LEDGER_BATCH_MAX: "0" })).toThrow(/LEDGER_BATCH_MAX/);
  });

  it("mixes accounts in a transaction unless LEDGER_BATCH_ONE_ACCOUNT is true, and refuses a value that is not a boolean", () => {
    expect(readLedgerConfig({}).batchOneAccount).toBe(false);
    expect(readLedgerConfig({ LEDGER_BATCH_ONE_ACCOUNT: "true" }).batchOneAccount).toBe(true);
    expect(readLedgerConfig({ LEDGER_BATCH_ONE_ACCOUNT: "false" }).batchOneAccount).toBe(false);
    expect(() => readLedgerConfig({ LEDGER_BATCH_ONE_ACCOUNT: "sometimes" })).toThrow(/LEDGER_BATCH_ONE_ACCOUNT/);
  });

  it("chains cached writes unless LEDGER_CHAINED_WRITES is false, and refuses a value that is not a boolean", () => {
    expect(readLedgerConfig({}).chainedWrites).toBe(true);
    expect(readLedgerConfig({ LEDGER_CHAINED_WRITES: "false" }).chainedWrites).toBe(false);
    expect(readLedgerConfig({ LEDGER_CHAINED_WRITES: "true" }).chainedWrites).toBe(true);
    expect(() => readLedgerConfig({ LEDGER_CHAINED_WRITES: "maybe" })).toThrow(/LEDGER_CHAINED_WRITES/);
  });
});
