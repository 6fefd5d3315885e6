import { execFileSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { expect, inject, it } from "vitest";
import { summarizeGcTrace } from "./driver-promotion.mjs";

// postgres.js as installed (with patches/postgres@3.4.9.patch) lets a settled query and its rows die
// young. Without the patch's `Query` hunk a quarter of what each 1,000-row query allocates is
// promoted into V8's old generation (docs/decisions/settled-queries-released.md): this fails on a
// driver upgrade that brings the retention back, whatever the upgrade's own tests say.
const SCRIPT = join(dirname(fileURLToPath(import.meta.url)), "driver-promotion.mjs");

it("promotes next to nothing of a loop of 1,000-row queries", () => {
  const trace = execFileSync(process.execPath, ["--trace-gc-nvp", SCRIPT], {
    env: { ...process.env, DATABASE_URL: inject("databaseUrl") },
    encoding: "utf8",
    timeout: 60_000,
    maxBuffer: 64 * 1024 * 1024,
  });
  const total = summarizeGcTrace(trace.split("\n"));
  expect(total.collections, "the loop allocated enough for young-generation collections").toBeGreaterThan(5);
  expect(total.promoted / total.allocated).toBeLessThan(0.05);
});
