import { metricsRegistry } from "@ledger/common";
import { expectHeldMatches, readStream, startStack, type Stack } from "@ledger/e2e";
import { afterAll, beforeAll, expect, it } from "vitest";

// Recovery runs in every replica of the hold service. Each pass claims what it finishes, so with
// three replicas starting at once over the same unfinished work, every operation is finished by one
// of them, once: the metric of finished operations (shared by the replicas of this one process)
// grows by exactly the number of operations.

let stack: Stack;

beforeAll(async () => {
  stack = await startStack({ recoveryAfterMs: 200 });
});
afterAll(async () => stack?.close());

async function recoveredReleases(): Promise<number> {
  const metric = await metricsRegistry.getSingleMetric("hold_recovered_operations_total")?.get();
  return metric?.values.filter((v) => v.labels["operation"] === "release").reduce((sum, v) => sum + v.value, 0) ?? 0;
}

it("finishes each unfinished release once with three replicas recovering at the same moment", { timeout: 150_000 }, async () => {
  const { api } = stack;
  const source = (await api.post("/entity", { entity_name: "w", entity_type: "wallet" })).body.entity.entity_id;
  await api.post("/entity/fund", { entity_id: source, amount: 1_000_000 });
  const count = 250;
  const ids: string[] = [];
  for (let i = 0; i < count; i += 25) {
    const created = await Promise.all(Array.from({ length: 25 }, () => api.post("/hold", { entity_id: source, amount: 10 })));
    ids.push(...created.map((r) => r.body.hold.hold_id as string));
  }
  // Every hold as a process that crashed after recording its release would leave it: the intent
  // stored, the ledger's reservation still held, long enough ago for recovery to take it.
  const holdSql = stack.holdSql();
  await holdSql`update holds set status = 'releasing', release_reason = 'released', updated_at = now() - interval '1 hour'
                where id in ${holdSql(ids)}`;
  const before = await recoveredReleases();

  // Two more replicas: each recovers at once when it starts, beside the stack's own.
  const replicas = await Promise.all([stack.startHoldReplica(), stack.startHoldReplica()]);
  await expect
    .poll(
      async () =>
        (await holdSql<{ n: bigint }[]>`select count(*) as n from holds where id in ${holdSql(ids)} and status = 'released'`)[0]!.n,
      {
        timeout: 90_000,
      },
    )
    .toBe(BigInt(count));
  // Give a repeated finish time to show before counting.
  await new Promise((resolve) => setTimeout(resolve, 1_500));

  expect((await recoveredReleases()) - before).toBe(count);
  const [entity] = await stack.sql<{ held: bigint; posted: bigint }[]>`select held, posted from entities where id = ${source}`;
  expect(entity).toEqual({ held: 0n, posted: 1_000_000n });
  const released = (await readStream(stack.natsUrl, stack.stream)).filter(
    (s) => s.event.type === "hold.released" && s.event.data.case === "hold" && ids.includes(s.event.data.value.holdId),
  );
  expect(released).toHaveLength(count);
  await expectHeldMatches(stack);
  for (const replica of replicas) await replica.close();
});
