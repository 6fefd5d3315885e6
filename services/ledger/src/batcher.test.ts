import { afterAll, beforeAll, expect, it } from "vitest";
import { ledgerViolations, startStack, type Stack } from "@ledger/e2e";

// Group commit: concurrent money commands share transactions, and each still gets its own answer.
// A refused command (insufficient funds) must not fail the others in its batch.

let stack: Stack;
beforeAll(async () => {
  stack = await startStack();
});
afterAll(async () => stack?.close());

async function batchStats(): Promise<{ sum: number; count: number }> {
  const text = await (await fetch(`${stack.ledgerUrl}/metrics`)).text();
  const read = (name: string) => Number(/^(\S+) (\S+)$/m.exec(text.split("\n").find((l) => l.startsWith(name + " ")) ?? "")?.[2] ?? 0);
  return { sum: read("ledger_batch_commands_sum"), count: read("ledger_batch_commands_count") };
}

it("shares transactions between concurrent commands and answers each on its own", async () => {
  const client = stack.ledgerClient(stack.account.api_key);
  const entity = async () => (await client.createEntity({ entityName: "w", entityType: "w" })).entity!.entityId;
  const [poor, rich, sink] = await Promise.all([entity(), entity(), entity()]);
  await client.fundEntity({ entityId: poor, amount: 300n });
  await client.fundEntity({ entityId: rich, amount: 100_000n });
  const before = await batchStats();

  const transfer = (from: string) =>
    client
      .createTransaction({
        description: "batch",
        status: 2,
        form: { case: "transfer", value: { fromEntityId: from, toEntityId: sink, amount: 10n } },
      })
      .then(
        () => "ok",
        (err: { rawMessage?: string }) => (String(err.rawMessage).includes("available") ? "insufficient" : `other: ${err.rawMessage}`),
      );
  const results = await Promise.all(Array.from({ length: 120 }, (_, i) => transfer(i % 2 === 0 ? poor : rich)));
  const poorResults = results.filter((_, i) => i % 2 === 0);
  const richResults = results.filter((_, i) => i % 2 === 1);
  expect(poorResults.filter((r) => r === "ok")).toHaveLength(30);
  expect(poorResults.filter((r) => r === "insufficient")).toHaveLength(30);
  // The rich entity's transfers shared batches with refused ones, and every one went through.
  expect(richResults.every((r) => r === "ok")).toBe(true);

  const after = await batchStats();
  const commands = after.sum - before.sum;
  const transactions = after.count - before.count;
  expect(commands).toBe(120);
  expect(transactions).toBeLessThan(120);
  const read = await client.getEntity({ entityId: sink });
  expect(read.entity!.balances!.posted).toBe(900n);
  expect(await ledgerViolations(stack.sql, stack.account.account_id)).toEqual([]);
});

it("claims many idempotency keys in one batch: each applies once, repeats replay, refusals store nothing", async () => {
  const client = stack.ledgerClient(stack.account.api_key);
  const entity = async () => (await client.createEntity({ entityName: "k", entityType: "k" })).entity!.entityId;
  const [payer, payee, broke] = await Promise.all([entity(), entity(), entity()]);
  await client.fundEntity({ entityId: payer, amount: 1_000n });
  const transfer = (key: string, from: string, amount: bigint) =>
    client
      .createTransaction(
        { description: "keyed", status: 2, form: { case: "transfer", value: { fromEntityId: from, toEntityId: payee, amount } } },
        { headers: { "idempotency-key": key } },
      )
      .then(
        (res) => ({ ok: true as const, group: res.transactionGroup!.transactionGroupId }),
        (err: { rawMessage?: string }) => ({ ok: false as const, message: String(err.rawMessage) }),
      );

  // 30 keys, each sent twice at once; 10 more keys whose transfers the broke entity cannot pay.
  const keys = Array.from({ length: 30 }, (_, i) => `batch-key-${i}`);
  const sent = [
    ...keys.map((k) => transfer(k, payer, 7n)),
    ...keys.map((k) => transfer(k, payer, 7n)),
    ...Array.from({ length: 10 }, (_, i) => transfer(`broke-key-${i}`, broke, 5n)),
  ];
  const results = await Promise.all(sent);
  for (let i = 0; i < 30; i++) {
    const [first, second] = [results[i]!, results[30 + i]!];
    expect(first.ok && second.ok).toBe(true);
    // The repeat answers with the very group the first one made.
    if (first.ok && second.ok) {
      expect(first.group).toMatch(/^trx-grp_/);
      expect(second.group).toBe(first.group);
    }
  }
  expect(results.slice(60).every((r) => !r.ok && r.message.includes("available"))).toBe(true);
  expect((await client.getEntity({ entityId: payer })).entity!.balances!.posted).toBe(1_000n - 30n * 7n);

  // A key used with another body is refused; a refused request's key is free for a fresh try.
  const conflict = await transfer("batch-key-0", payer, 8n);
  expect(conflict.ok).toBe(false);
  if (!conflict.ok) expect(conflict.message).toMatch(/different request/);
  await client.fundEntity({ entityId: broke, amount: 50n });
  const retried = await Promise.all(Array.from({ length: 10 }, (_, i) => transfer(`broke-key-${i}`, broke, 5n)));
  expect(retried.every((r) => r.ok)).toBe(true);
  expect((await client.getEntity({ entityId: broke })).entity!.balances!.posted).toBe(0n);
  expect((await client.getEntity({ entityId: payee })).entity!.balances!.posted).toBe(30n * 7n + 50n);
  expect(await ledgerViolations(stack.sql, stack.account.account_id)).toEqual([]);
});
