import { spawn, type ChildProcess } from "node:child_process";
import { fileURLToPath } from "node:url";
import { createClient, type Client } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { LedgerService, TransactionStatus } from "@ledger/proto/ledger/v1/ledger_pb.js";
import { afterAll, beforeAll, expect, it, vi } from "vitest";
import { freePort } from "@ledger/testing";
import { ledgerViolations, startStack, TEST_SERVICE_TOKEN, type Stack } from "@ledger/e2e";

// A ledger SIGKILLed in the middle of a stream of batches: every item a batch answer acknowledged
// stays applied, and when the client retries every batch with the same item keys, the acknowledged
// items replay, the rest apply, and no item is applied twice.

const MAIN = fileURLToPath(new URL("./main.ts", import.meta.url));
const ROOT = fileURLToPath(new URL("../../../", import.meta.url));
const BATCHES = 40;
const ITEMS = 50;

/** The one row of an aggregate query. */
function first<T>(rows: readonly T[]): T {
  return rows[0]!;
}

let stack: Stack;
let port: number;
let child: ChildProcess | undefined;

async function startLedgerProcess() {
  // node itself (not the tsx wrapper), so SIGKILL hits the service and not a parent it would outlive.
  child = spawn(process.execPath, ["--import", "tsx", MAIN], {
    cwd: ROOT,
    env: {
      ...process.env,
      DATABASE_URL: stack.databaseUrl,
      NATS_URL: stack.natsUrl,
      NATS_STREAM: stack.stream,
      NATS_SUBJECT_PREFIX: stack.subjectPrefix,
      SERVICE_TOKEN: TEST_SERVICE_TOKEN,
      LEDGER_PORT: String(port),
      LOG_LEVEL: "error",
    },
    stdio: "ignore",
  });
  await vi.waitFor(
    async () => {
      if (!(await fetch(`http://127.0.0.1:${port}/healthz`).catch(() => null))?.ok) throw new Error("ledger did not start");
    },
    { timeout: 30_000, interval: 200 },
  );
}

async function killLedgerProcess() {
  const c = child;
  if (!c || c.exitCode !== null || c.signalCode !== null) return;
  await new Promise<void>((resolve) => {
    c.once("exit", () => resolve());
    c.kill("SIGKILL");
  });
}

beforeAll(async () => {
  port = await freePort();
  stack = await startStack();
});
afterAll(async () => {
  await killLedgerProcess();
  await stack?.close();
});

it("loses no acknowledged item and applies none twice across a SIGKILL, when batches are retried with their item keys", async () => {
  const { api } = stack;
  const source = (await api.post("/entity", { entity_name: "payroll", entity_type: "wallet" })).body.entity.entity_id as string;
  const payees: string[] = [];
  for (let i = 0; i < 10; i++)
    payees.push((await api.post("/entity", { entity_name: `payee ${i}`, entity_type: "wallet" })).body.entity.entity_id);
  expect((await api.post("/entity/fund", { entity_id: source, amount: 1_000_000 })).status).toBe(200);

  await startLedgerProcess();
  const transport = createConnectTransport({ baseUrl: `http://127.0.0.1:${port}`, httpVersion: "2", useBinaryFormat: true });
  const client: Client<typeof LedgerService> = createClient(LedgerService, transport);
  const call = { headers: { authorization: stack.account.api_key } };
  const batch = (b: number) => ({
    transactions: Array.from({ length: ITEMS }, (_, i) => ({
      idempotencyKey: `crash-${b}-${i}`,
      transaction: {
        description: `crash-${b}-${i}`,
        status: TransactionStatus.POSTED,
        form: {
          case: "transfer" as const,
          value: { fromEntityId: source, toEntityId: payees[i % payees.length]!, amount: BigInt(1 + (i % 7)) },
        },
      },
    })),
  });

  // The stream: four clients send batches one after another; the ledger dies while they run.
  const acknowledged = new Map<string, string>(); // item key -> group id
  let next = 0;
  let answered = 0;
  const sender = async () => {
    for (let b = next++; b < BATCHES; b = next++) {
      try {
        const res = await client.createTransactions(batch(b), call);
        answered++;
        res.results.forEach((r, i) => {
          expect(r.result.case).toBe("transactionGroup");
          if (r.result.case === "transactionGroup") acknowledged.set(`crash-${b}-${i}`, r.result.value.transactionGroupId);
        });
      } catch {
        // The process died under this batch: the retry below finds out what happened to it.
      }
    }
  };
  const senders = Array.from({ length: 4 }, sender);
  await expect.poll(() => answered, { timeout: 30_000, interval: 5 }).toBeGreaterThanOrEqual(5);
  // Batches on the payroll entity have been chained behind one another (docs/decisions/chained-writes.md),
  // so the kill may land between a write and the one resting on it.
  const chained = async () =>
    Number(
      /^ledger_batch_paths_total\{path="chained"\} (\d+)$/m.exec(await (await fetch(`http://127.0.0.1:${port}/metrics`)).text())?.[1] ?? 0,
    );
  await expect.poll(chained, { timeout: 30_000, interval: 5 }).toBeGreaterThan(0);
  await killLedgerProcess();
  await Promise.all(senders);
  expect(acknowledged.size).toBeGreaterThan(0);
  expect(acknowledged.size).toBeLessThan(BATCHES * ITEMS);

  // Every acknowledged item is still there, once.
  const { n: kept } = first(
    await stack.sql<{ n: bigint }[]>`
    select count(*)::int8 as n from transaction_groups where id = any(${[...acknowledged.values()]})`,
  );
  expect(kept).toBe(BigInt(acknowledged.size));

  await startLedgerProcess();
  for (let b = 0; b < BATCHES; b++) {
    const res = await client.createTransactions(batch(b), call);
    res.results.forEach((r, i) => {
      const key = `crash-${b}-${i}`;
      expect(r.result.case, key).toBe("transactionGroup");
      if (r.result.case !== "transactionGroup") return;
      const first = acknowledged.get(key);
      if (first) {
        expect(r.replayed, key).toBe(true);
        expect(r.result.value.transactionGroupId, key).toBe(first);
      }
    });
  }

  const twice = await stack.sql<{ description: string }[]>`
    select description from transaction_groups where description like 'crash-%' group by description having count(*) > 1`;
  expect(twice).toEqual([]);
  const { n: applied } = first(
    await stack.sql<{ n: bigint }[]>`select count(*)::int8 as n from transaction_groups where description like 'crash-%'`,
  );
  expect(applied).toBe(BigInt(BATCHES * ITEMS));
  const perBatch = Array.from({ length: ITEMS }, (_, i) => 1 + (i % 7)).reduce((a, b) => a + b, 0);
  const { total } = first(await stack.sql<{ total: bigint }[]>`select sum(posted)::int8 as total from entities where id = any(${payees})`);
  expect(total).toBe(BigInt(perBatch * BATCHES));
  expect(await ledgerViolations(stack.sql, stack.account.account_id)).toEqual([]);
});
