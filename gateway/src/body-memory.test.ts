import { spawn, type ChildProcess } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { request } from "node:http";
import { fileURLToPath } from "node:url";
import { afterAll, afterEach, beforeAll, beforeEach, expect, it, vi } from "vitest";
import { startStack, type Stack } from "@ledger/e2e";
import { freePort } from "@ledger/testing";

// What a flood of large request bodies costs the gateway's memory, measured on a gateway of its
// own in a child process: bodies without a valid key are never read, and the bodies read at once
// are bounded by GATEWAY_BODY_BUDGET_BYTES, so the process's peak resident memory moves by far
// less than the bytes sent. The peak (VmHWM) is what is compared, reset before each flood, so the
// check does not depend on when the collector runs or when memory is returned.

const MAIN = fileURLToPath(new URL("./main.ts", import.meta.url));
const ROOT = fileURLToPath(new URL("../../", import.meta.url));
/** A body just under the batch limit (4 MiB): valid JSON up to where it breaks off. */
const BODY = Buffer.from(`{"transactions":[{"description":"${"x".repeat(4 * 1024 * 1024 - 100)}"`);
const FLOOD = 200;
/**
 * What a flood may add to the peak: the budget (32 MiB) of bodies read, each copied once and
 * decoded, plus what the collector has not yet freed of the bodies read before. That garbage grows
 * with how many bodies were read before the rest found the budget taken, which depends on timing:
 * 8 to 42 of the 200 on a loaded 2-core machine, for 109 to 266 MB. The flood itself is 800 MB;
 * before the key was checked first and bodies were budgeted, the peak grew by 500-750 MB.
 */
const MAX_GROWTH_MB = 350;

let stack: Stack;
let child: ChildProcess | undefined;
let port: number;

// The ledger answers the gateway's key look-ups.
beforeAll(async () => {
  stack = await startStack();
}, 60_000);
afterAll(async () => stack?.close());

// A gateway of its own for each test: what one flood left in memory must not hide the next's.
beforeEach(async () => {
  port = await freePort();
  child = spawn(process.execPath, ["--import", "tsx", MAIN], {
    cwd: ROOT,
    env: {
      ...process.env,
      GATEWAY_HOST: "127.0.0.1",
      PORT: String(port),
      GATEWAY_OPS_PORT: "0",
      LEDGER_URL: stack.ledgerUrl,
      GATEWAY_RATE_LIMIT_PER_SECOND: "0",
      LOG_LEVEL: "error",
    },
    stdio: "ignore",
  });
  await vi.waitFor(
    async () => {
      if (!(await fetch(`http://127.0.0.1:${port}/healthz`).catch(() => null))?.ok) throw new Error("the gateway did not start");
    },
    { timeout: 30_000, interval: 200 },
  );
  // Warm: the paths the flood takes are loaded and compiled before the baseline is read.
  for (let i = 0; i < 20; i++) {
    await post(Buffer.from("{"), undefined);
    await post(Buffer.from("{"), stack.account.api_key);
  }
}, 60_000);

afterEach(async () => {
  const running = child;
  child = undefined;
  if (running && running.exitCode === null) {
    const exited = new Promise((resolve) => running.once("exit", resolve));
    running.kill("SIGTERM");
    await exited;
  }
});

/** The child's resident memory now and at its peak, in MB. */
function memory(): { rss: number; peak: number } {
  const status = readFileSync(`/proc/${child!.pid}/status`, "utf8");
  const kb = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, "m").exec(status)![1]);
  return { rss: kb("VmRSS") / 1024, peak: kb("VmHWM") / 1024 };
}

/** Resets the child's peak to what it holds now (Linux: "5" to clear_refs). */
function resetPeak(): void {
  writeFileSync(`/proc/${child!.pid}/clear_refs`, "5");
}

/** POSTs `body` to the batch path; the status, or 0 when the gateway closed the connection before answering. */
function post(body: Buffer, apiKey: string | undefined): Promise<number> {
  return new Promise((resolve) => {
    const req = request(
      {
        host: "127.0.0.1",
        port,
        method: "POST",
        path: "/v1/transaction/batch",
        agent: false,
        headers: { "content-type": "application/json", "content-length": body.length, ...(apiKey ? { authorization: apiKey } : {}) },
      },
      (res) => {
        res.resume();
        res.on("end", () => resolve(res.statusCode ?? 0));
        res.on("error", () => resolve(res.statusCode ?? 0));
      },
    );
    // An answer before the whole body was sent closes the connection under it.
    req.on("error", () => resolve(0));
    req.end(body);
  });
}

async function flood(apiKey: string | undefined): Promise<{ statuses: Map<number, number>; growth: number }> {
  resetPeak();
  const before = memory();
  const statuses = new Map<number, number>();
  for (const status of await Promise.all(Array.from({ length: FLOOD }, () => post(BODY, apiKey)))) {
    statuses.set(status, (statuses.get(status) ?? 0) + 1);
  }
  const growth = memory().peak - before.rss;
  console.log(
    `flood ${apiKey ? "with" : "without"} a key: answers ${JSON.stringify(Object.fromEntries(statuses))}, peak +${growth.toFixed(0)} MB`,
  );
  return { statuses, growth };
}

it("never reads a body sent without a valid key: 200 keyless 4 MB bodies barely move the gateway's peak memory", async () => {
  const { statuses, growth } = await flood(undefined);
  expect(growth, `peak grew by ${growth.toFixed(0)} MB`).toBeLessThan(MAX_GROWTH_MB);
  // Every answer that arrived is 401; the others were cut off by the gateway closing the connection.
  expect([...statuses.keys()].filter((s) => s !== 401 && s !== 0)).toEqual([]);
  expect(statuses.get(401) ?? 0).toBeGreaterThan(0);
}, 120_000);

it("reads at most the body budget at once: 200 authenticated 4 MB bodies keep the peak bounded, and memory returns", async () => {
  const baseline = memory().rss;
  const { statuses, growth } = await flood(stack.account.api_key);
  expect(growth, `peak grew by ${growth.toFixed(0)} MB`).toBeLessThan(MAX_GROWTH_MB);
  // Read ones are broken JSON (400); the rest found the budget taken (503) or were cut off.
  expect([...statuses.keys()].filter((s) => s !== 400 && s !== 503 && s !== 0)).toEqual([]);
  expect(statuses.get(400) ?? 0).toBeGreaterThan(0);
  // What it did take is given back: within a generous margin of where it started.
  await vi.waitFor(() => expect(memory().rss).toBeLessThan(baseline + MAX_GROWTH_MB / 2), { timeout: 30_000, interval: 500 });
}, 120_000);
