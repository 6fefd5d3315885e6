import { spawn, type ChildProcess } from "node:child_process";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, expect, it, vi } from "vitest";
import { freePort } from "@ledger/testing";
import { expectHeldMatches, startStack, TEST_SERVICE_TOKEN, type Stack } from "@ledger/e2e";
import { CRASH_POINTS, type CrashPoint } from "./crash.js";

// Crash safety between the hold service and the ledger: the hold service runs as a child process
// that exits at an injected point (HOLD_CRASH_AT); after a restart, recovery must leave `held`
// equal to the remaining amounts of active holds, and no money may have moved twice.

const MAIN = fileURLToPath(new URL("./main.ts", import.meta.url));
const ROOT = fileURLToPath(new URL("../../../", import.meta.url));

let stack: Stack;
let port: number;
let child: ChildProcess | undefined;

async function startHoldProcess(crashAt?: CrashPoint) {
  // node itself (not the tsx wrapper), so SIGKILL hits the service and not a parent it would outlive.
  child = spawn(process.execPath, ["--import", "tsx", MAIN], {
    cwd: ROOT,
    env: {
      ...process.env,
      DATABASE_URL: stack.databaseUrl,
      HOLD_DATABASE_URL: stack.holdDatabaseUrl,
      NATS_URL: stack.natsUrl,
      NATS_STREAM: stack.stream,
      NATS_SUBJECT_PREFIX: stack.subjectPrefix,
      LEDGER_URL: stack.ledgerUrl,
      SERVICE_TOKEN: TEST_SERVICE_TOKEN,
      HOLD_PORT: String(port),
      HOLD_RECOVERY_AFTER_MS: "300",
      LOG_LEVEL: "error",
      ...(crashAt ? { HOLD_CRASH_AT: crashAt } : {}),
    },
    stdio: "ignore",
  });
  await vi.waitFor(
    async () => {
      if (!(await fetch(`http://127.0.0.1:${port}/healthz`).catch(() => null))?.ok) throw new Error("hold service did not start");
    },
    { timeout: 20_000, interval: 200 },
  );
}

async function stopHoldProcess() {
  const c = child;
  if (!c || c.exitCode !== null || c.signalCode !== null) return;
  await new Promise<void>((resolve) => {
    c.once("exit", () => resolve());
    c.kill("SIGKILL");
  });
}

async function waitForExit() {
  const c = child!;
  if (c.exitCode !== null || c.signalCode !== null) return;
  await new Promise<void>((resolve) => c.once("exit", () => resolve()));
}

beforeAll(async () => {
  port = await freePort();
  stack = await startStack({ externalHoldUrl: `http://127.0.0.1:${port}` });
});
afterAll(async () => {
  await stopHoldProcess();
  await stack?.close();
});

it.each(CRASH_POINTS)("recovers after a crash at %s", async (point) => {
  const { api } = stack;
  const source = (await api.post("/entity", { entity_name: "s", entity_type: "w" })).body.entity.entity_id;
  const dest = (await api.post("/entity", { entity_name: "d", entity_type: "w" })).body.entity.entity_id;
  await api.post("/entity/fund", { entity_id: source, amount: 1000 });
  await startHoldProcess(point);

  const key = { "idempotency-key": `crash-${point}-${Date.now()}` };
  let holdId: string | undefined;
  if (point.includes("create") || point.includes("reserve")) {
    const res = await api.post("/hold", { entity_id: source, amount: 300 }, key);
    expect(res.status).toBeGreaterThanOrEqual(500);
  } else {
    holdId = (await api.post("/hold", { entity_id: source, amount: 300 })).body.hold.hold_id;
    const res = point.includes("capture")
      ? await api.post("/hold/capture", { hold_id: holdId, amount: 120, destination_entity_id: dest }, key)
      : await api.post("/hold/release", { hold_id: holdId }, key);
    expect(res.status).toBeGreaterThanOrEqual(500);
  }
  await waitForExit();
  expect(child!.exitCode).toBe(137);

  await startHoldProcess();
  // Recovery finishes every unfinished intent.
  await expect.poll(() => unfinishedIntents(), { timeout: 20_000 }).toBe(0n);

  if (!holdId) {
    // The client retries with its key and gets the one hold recovery completed, as recovery answered the key.
    const retry = await api.post("/hold", { entity_id: source, amount: 300 }, key);
    expect(retry.status).toBe(200);
    expect(retry.headers.get("idempotent-replayed")).toBe("true");
    const [count] = await stack.holdSql()<{ n: bigint }[]>`select count(*)::int8 as n from holds where entity_id = ${source}`;
    expect(count!.n).toBe(1n);
  } else if (point.includes("capture")) {
    const retry = await api.post("/hold/capture", { hold_id: holdId, amount: 120, destination_entity_id: dest }, key);
    expect(retry.status).toBe(200);
    expect(retry.headers.get("idempotent-replayed")).toBe("true");
    expect(retry.body.hold.captured_amount).toBe(120);
  } else {
    expect((await api.get("/hold", { hold_id: holdId })).body.hold).toMatchObject({ status: "released", release_reason: "requested" });
    const retry = await api.post("/hold/release", { hold_id: holdId }, key);
    expect(retry.status).toBe(200);
    expect(retry.headers.get("idempotent-replayed")).toBe("true");
    expect(retry.body.hold).toMatchObject({ status: "released", release_reason: "requested" });
  }

  const [destination] = await stack.sql<{ posted: bigint }[]>`select posted from entities where id = ${dest}`;
  const [captured] = await stack.holdSql()<
    { total: bigint }[]
  >`select coalesce(sum(captured_amount), 0)::int8 as total from holds where entity_id = ${source}`;
  expect(destination!.posted).toBe(captured!.total);
  await expectHeldMatches(stack);
  await stopHoldProcess();
});

// The ledger calls of concurrent holds go together (ledger-batch.ts): a crash right after one
// returns leaves many holds half done at once, some applied by the ledger and some not yet sent.
it.each(["after_ledger_reserve", "after_ledger_capture"] as const)(
  "recovers every hold of a batched ledger call after a crash at %s",
  async (point) => {
    const { api } = stack;
    const source = (await api.post("/entity", { entity_name: "s", entity_type: "w" })).body.entity.entity_id;
    const dest = (await api.post("/entity", { entity_name: "d", entity_type: "w" })).body.entity.entity_id;
    await api.post("/entity/fund", { entity_id: source, amount: 10_000 });
    await startHoldProcess(point);

    const n = 12;
    if (point === "after_ledger_reserve") {
      const answers = await Promise.all(Array.from({ length: n }, () => api.post("/hold", { entity_id: source, amount: 100 })));
      expect(answers.every((a) => a.status >= 500)).toBe(true);
    } else {
      const holdIds: string[] = [];
      for (let i = 0; i < n; i++) holdIds.push((await api.post("/hold", { entity_id: source, amount: 100 })).body.hold.hold_id);
      const answers = await Promise.all(
        holdIds.map((id) => api.post("/hold/capture", { hold_id: id, amount: 60, destination_entity_id: dest })),
      );
      expect(answers.every((a) => a.status >= 500)).toBe(true);
    }
    await waitForExit();
    expect(child!.exitCode).toBe(137);

    await startHoldProcess();
    await expect.poll(() => unfinishedIntents(source), { timeout: 20_000 }).toBe(0n);
    const [destination] = await stack.sql<{ posted: bigint }[]>`select posted from entities where id = ${dest}`;
    const [captured] = await stack.holdSql()<
      { total: bigint; holds: bigint }[]
    >`select coalesce(sum(captured_amount), 0)::int8 as total, count(*)::int8 as holds from holds where entity_id = ${source}`;
    expect(destination!.posted).toBe(captured!.total);
    // At least the call that returned was applied and its holds finished by recovery.
    if (point === "after_ledger_reserve") expect(captured!.holds).toBeGreaterThan(0n);
    else expect(captured!.total).toBeGreaterThan(0n);
    await expectHeldMatches(stack);
    await stopHoldProcess();
  },
);

/** Hold operations whose intent is committed but not finished (what recovery completes), of one entity or all. */
async function unfinishedIntents(entityId?: string): Promise<bigint> {
  const entity = entityId ?? null;
  const [row] = await stack.holdSql()<{ n: bigint }[]>`
    select (select count(*) from holds where status in ('creating', 'releasing') and (${entity}::text is null or entity_id = ${entity}))
         + (select count(*) from captures c join holds h on h.id = c.hold_id
             where c.status = 'pending' and (${entity}::text is null or h.entity_id = ${entity})) as n`;
  return row!.n;
}
