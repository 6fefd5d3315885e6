import { defineConfig } from "vitest/config";

// One run covers every package: tests live beside their source as *.test.ts; tests that need the
// whole system and belong to no one service are in e2e/.
export default defineConfig({
  test: {
    include: [
      "packages/*/src/**/*.test.ts",
      "services/*/src/**/*.test.ts",
      "gateway/src/**/*.test.ts",
      "e2e/src/**/*.test.ts",
      "deploy/**/*.test.ts",
      "scripts/**/*.test.ts",
      "bench/src/**/*.test.ts",
    ],
    exclude: ["**/node_modules/**", "**/*.faults.test.ts"],
    // The run's database, then the ledger's schema as LEDGER_TEST_SCHEMA asks (plain unless set); at
    // the end, whatever JetStream streams this run left behind.
    globalSetup: ["packages/testing/src/global-setup.ts", "services/ledger/src/test-schema.setup.ts", "e2e/src/run-streams.ts"],
    pool: "forks",
    // expect.poll: what a test waits for (an event, a delivery, a restart) takes seconds, not one.
    expect: { poll: { timeout: 15_000, interval: 100 } },
    testTimeout: 60_000,
    hookTimeout: 60_000,
    reporters: ["default"],
  },
});
