import { ConnectError } from "@connectrpc/connect";
import { ledgerViolations, startStack, type Stack } from "@ledger/e2e";
import { answerLosingProxy, type AnswerLosingProxy } from "@ledger/testing";
import { afterAll, beforeAll, expect, inject, it } from "vitest";

// A transaction whose answer is lost: Postgres applied (and committed) a batch's write, and the
// connection died before the ledger heard back. The ledger cannot know whether it committed, so
// it must not apply those transfers again: each caller gets an error, and none is applied twice.
// The ledger reaches Postgres through a TCP proxy here that, once armed, passes the next money
// write (and the COMMIT behind it) to Postgres, drops whatever Postgres answers, and cuts the
// connection: a real server, a real commit, a real lost connection.

let stack: Stack;
let proxy: AnswerLosingProxy;
beforeAll(async () => {
  // The write statement of a money batch, on either path (docs/architecture.md#cached-balances).
  proxy = await answerLosingProxy(new URL(inject("databaseUrl")), "ordinary_balances as (");
  stack = await startStack({ ledger: { databaseUrl: proxy.url } });
});
afterAll(async () => {
  await stack?.close();
  await proxy?.close();
});

it("applies no transfer twice when the answer to a batch's write is lost", async () => {
  const client = stack.ledgerClient(stack.account.api_key);
  const entity = async () => (await client.createEntity({ entityName: "lost", entityType: "wallet" })).entity!.entityId;
  const [a, b] = await Promise.all([entity(), entity()]);
  await client.fundEntity({ entityId: a, amount: 1_000n });
  // Once without loss, so both entities are known and the batch below may take either path.
  await client.createTransaction({
    description: "warm",
    status: 2,
    form: { case: "transfer", value: { fromEntityId: a, toEntityId: b, amount: 1n } },
  });

  proxy.arm();
  await new Promise((done) => setTimeout(done, 200)); // the pool notices its connections closed
  const calls = 8;
  const outcomes = await Promise.all(
    Array.from({ length: calls }, (_, i) =>
      client
        .createTransaction({
          description: `lost ${i}`,
          status: 2,
          form: { case: "transfer", value: { fromEntityId: a, toEntityId: b, amount: 10n } },
        })
        .then(
          () => "ok" as const,
          (err: unknown) => ConnectError.from(err),
        ),
    ),
  );
  expect(proxy.fired()).toBe(true);

  // Each call's transfer exists at most once, whatever its caller heard; one the caller heard
  // succeed exists exactly once.
  const rows = await stack.sql<{ description: string; n: number }[]>`
    select description, count(*)::int as n from transaction_groups
    where account_id = ${stack.account.account_id} and description like 'lost %' group by description`;
  const applied = new Map(rows.map((r) => [r.description, r.n]));
  outcomes.forEach((outcome, i) => {
    const n = applied.get(`lost ${i}`) ?? 0;
    expect(n).toBeLessThanOrEqual(1);
    if (outcome === "ok") expect(n).toBe(1);
  });
  // The lost write reached Postgres and committed: some callers were told of an error for a
  // transfer that happened, which is what an unknown outcome is (a key makes the retry safe).
  expect(outcomes.some((o) => o !== "ok")).toBe(true);
  const [row] = await stack.sql<{ posted: bigint }[]>`select posted from entities where id = ${b}`;
  expect(row!.posted).toBe(1n + 10n * BigInt([...applied.values()].reduce((s, n) => s + n, 0)));
  expect(await ledgerViolations(stack.sql, stack.account.account_id)).toEqual([]);
});
