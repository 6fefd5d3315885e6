import { defineConfig } from "vitest/config";

// The fault tests (pnpm test:faults): they kill services and restart NATS and Postgres, so they
// run on their own, after the other tests, never beside them.
export default defineConfig({
  test: {
    include: ["e2e/src/**/*.faults.test.ts"],
    globalSetup: ["packages/testing/src/global-setup.ts", "e2e/src/run-streams.ts"],
    pool: "forks",
    // expect.poll: what a test waits for (an event, a delivery, a restart) takes seconds, not one.
    expect: { poll: { timeout: 15_000, interval: 100 } },
    testTimeout: 600_000,
    hookTimeout: 120_000,
  },
});
