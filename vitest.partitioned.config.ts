import { defineConfig } from "vitest/config";
import base from "./vitest.config.js";

// The ledger's money tests on its schema partitioned by hash of account_id, with one account per
// group-commit transaction: the rules of a Postgres distributed by account (docs/scaling.md). Set
// here, before the global setup reads them; the test processes inherit them.
process.env["LEDGER_TEST_SCHEMA"] = "partitioned";
process.env["LEDGER_BATCH_ONE_ACCOUNT"] = "true";

export default defineConfig({
  test: {
    ...base.test,
    include: [
      "services/ledger/src/money.test.ts",
      "services/ledger/src/batch.test.ts",
      "services/ledger/src/batcher.test.ts",
      "services/ledger/src/batch-paths.test.ts",
      "services/ledger/src/cached-balances.test.ts",
      "services/ledger/src/references.test.ts",
      "services/ledger/src/reservations.test.ts",
      "services/ledger/src/history.test.ts",
      "services/ledger/src/balance-alerts.test.ts",
      "services/ledger/src/entity-lifecycle.test.ts",
      "services/ledger/src/list-query.test.ts",
      "services/ledger/src/outbox.test.ts",
    ],
  },
});
