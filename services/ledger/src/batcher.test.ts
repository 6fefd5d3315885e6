import { afterAll, beforeAll, expect, it } from "vitest";
import { ledgerViolations, startStack, type Stack } from "@ledger/testing";

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
      .createTransaction({ description: "batch", status: 2, form: { case: "transfer", value: { fromEntityId: from, toEntityId: sink, amount: 10n } } })
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
