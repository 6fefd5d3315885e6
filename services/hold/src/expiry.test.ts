import { afterAll, beforeAll, expect, it } from "vitest";
import { expectHeldMatches, readStream, startStack, type Stack } from "@ledger/e2e";

// Expiry is driven by the hold database, not by timers in one process: it survives a restart of
// the hold service, and several replicas release each due hold exactly once.

let stack: Stack;

beforeAll(async () => {
  stack = await startStack();
});
afterAll(async () => stack?.close());

async function fundedEntity(amount: number): Promise<string> {
  const id = (await stack.api.post("/entity", { entity_name: "w", entity_type: "wallet" })).body.entity.entity_id;
  await stack.api.post("/entity/fund", { entity_id: id, amount });
  return id;
}

async function releasedEvents(holdIds: Set<string>) {
  return (await readStream(stack.natsUrl, stack.stream)).filter(
    (s) => s.event.type === "hold.released" && s.event.data.case === "hold" && holdIds.has(s.event.data.value.holdId),
  );
}

it("releases each due hold exactly once with three replicas running", async () => {
  const source = await fundedEntity(10_000);
  const replicas = [await stack.startHoldReplica(), await stack.startHoldReplica()];
  const expiresAt = new Date(Date.now() + 1_500).toISOString();
  const created = await Promise.all(
    Array.from({ length: 20 }, () => stack.api.post("/hold", { entity_id: source, amount: 100, expires_at: expiresAt })),
  );
  const ids = new Set(created.map((r) => r.body.hold.hold_id as string));
  expect(ids.size).toBe(20);
  await expect.poll(async () => (await releasedEvents(ids)).length).toBeGreaterThanOrEqual(20);
  // Give a duplicate release time to show up before counting.
  await new Promise((resolve) => setTimeout(resolve, 1_000));
  const events = await releasedEvents(ids);
  expect(events).toHaveLength(20);
  expect(new Set(events.map((e) => (e.event.data.case === "hold" ? e.event.data.value.holdId : ""))).size).toBe(20);
  for (const e of events) expect(e.event.data.value).toMatchObject({ status: "released", releaseReason: "expired" });
  const [entity] = await stack.sql<{ held: bigint }[]>`select held from entities where id = ${source}`;
  expect(entity!.held).toBe(0n);
  await expectHeldMatches(stack);
  for (const replica of replicas) await replica.close();
});

it("releases a hold that fell due while no hold service ran, once one starts again", async () => {
  const source = await fundedEntity(100);
  const hold = (await stack.api.post("/hold", { entity_id: source, amount: 40, expires_at: new Date(Date.now() + 2_000).toISOString() }))
    .body.hold;
  expect(hold.status).toBe("held");
  // Stop the only hold process: nothing can release the hold when it falls due.
  await stack.hold!.close();
  await new Promise((resolve) => setTimeout(resolve, 3_000));
  const [still] = await stack.holdSql()<{ status: string }[]>`select status from holds where id = ${hold.hold_id}`;
  expect(still!.status).toBe("held");
  const [reserved] = await stack.sql<{ held: bigint }[]>`select held from entities where id = ${source}`;
  expect(reserved!.held).toBe(40n);

  await stack.startHoldReplica();
  await expect
    .poll(
      async () => {
        const [row] = await stack.holdSql()<{ status: string; release_reason: string | null }[]>`
        select status, release_reason from holds where id = ${hold.hold_id}`;
        return row;
      },
      { timeout: 10_000 },
    )
    .toEqual({ status: "released", release_reason: "expired" });
  const [after] = await stack.sql<{ held: bigint; posted: bigint }[]>`select held, posted from entities where id = ${source}`;
  expect(after).toEqual({ held: 0n, posted: 100n });
  await expect.poll(async () => (await releasedEvents(new Set([hold.hold_id]))).length).toBe(1);
  await expectHeldMatches(stack);
});
