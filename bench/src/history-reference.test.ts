import { fileURLToPath } from "node:url";
import { createLogger, migrate } from "@ledger/common";
import { schemaClient } from "@ledger/e2e";
import { describe, expect, inject, it } from "vitest";
import { historyReferenceVariables, runHistoryReference } from "./history-reference.js";

// The history targets' reference is the ledger's SQL run alone through pgbench: the moments its
// reads draw from must be the history's, and the scripts must still run on the ledger's schema
// (a renamed column would otherwise surface only in a full bench run).

const ENTITY = { entityId: "ent_reference", accountId: "acct_reference", programId: "prog_reference" };

/** `count` moments a millisecond apart from 2026-11-28T12:00:00Z, each to the microsecond. */
function moments(count: number): string[] {
  const start = Date.parse("2026-11-28T12:00:00Z");
  return Array.from({ length: count }, (_, i) => new Date(start + i).toISOString().replace("Z", `${String(i % 1000).padStart(3, "0")}Z`));
}

describe("historyReferenceVariables", () => {
  it("draws as-of moments from the whole history and statement windows from all but its last two pages", () => {
    const history = moments(2_003);
    expect(historyReferenceVariables(ENTITY, history)).toEqual({
      account: "acct_reference",
      program: "prog_reference",
      entity: "ent_reference",
      first_us: "1795867200000000",
      // moments[2]: every window from it on holds the 2,001 legs after it.
      last_from_us: "1795867200002002",
      last_us: "1795867202002002",
      page_limit: "1001",
    });
  });

  it("refuses a history too short for a window two pages long", () => {
    expect(() => historyReferenceVariables(ENTITY, moments(2_000))).toThrow("needs more than 2000 legs");
  });
});

describe("runHistoryReference", () => {
  it("runs both scripts through pgbench on the ledger's schema and reads each one's latencies", async () => {
    const databaseUrl = inject("databaseUrl");
    const sql = schemaClient(databaseUrl, "ledger", 1);
    try {
      const migrations = fileURLToPath(new URL("../../services/ledger/migrations", import.meta.url));
      await migrate(sql, "ledger", migrations, createLogger("history-reference-test", "silent"));
    } finally {
      await sql.end({ timeout: 1 });
    }
    // An entity with no rows: what is checked is that pgbench takes the scripts and the schema has what they read.
    const results = await runHistoryReference({
      databaseUrl,
      entity: ENTITY,
      moments: moments(2_001),
      workloads: ["as-of", "statement"],
      seconds: 1,
    });
    for (const workload of ["as-of", "statement"] as const) {
      const result = results[workload]!;
      expect(result.transactions, workload).toBeGreaterThan(0);
      expect(result.p50Ms, workload).toBeGreaterThan(0);
      expect(result.p99Ms, workload).toBeGreaterThanOrEqual(result.p50Ms);
    }
  });
});
