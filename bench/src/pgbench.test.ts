import { describe, expect, it } from "vitest";
import { transactionLatenciesMs } from "./pgbench.js";

// The p99 target's reference is read off pgbench's per-transaction log; a misread column would
// compare the ledger's tail against the wrong number.

describe("transactionLatenciesMs", () => {
  it("reads the third column, in microseconds, as milliseconds, and skips what did not run", () => {
    const log = [
      "0 1 8532 0 1764245101 123456",
      "3 7 21400 0 1764245101 223456",
      "5 2 skipped 0 1764245102 5",
      "6 9 failed 0 1764245102 6 serialization",
      "",
    ].join("\n");
    expect(transactionLatenciesMs(log)).toEqual([8.532, 21.4]);
  });

  it("answers nothing for an empty log", () => {
    expect(transactionLatenciesMs("")).toEqual([]);
  });
});
