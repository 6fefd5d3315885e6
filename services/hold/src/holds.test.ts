import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { expectHeldMatches, readStream, startStack, type Api, type Stack } from "@ledger/e2e";
import { HoldReleaseReason, HoldStatus } from "@ledger/proto/hold/v1/hold_pb.js";

// Holds through the REST gateway, the hold service and the ledger's reservations, against real
// Postgres and NATS. After each test the ledger's invariants hold and `held` equals the remaining
// amounts of active holds.

let stack: Stack;
let api: Api;

beforeAll(async () => {
  stack = await startStack();
  api = stack.api;
});
afterAll(async () => stack?.close());

async function entity(): Promise<string> {
  return (await api.post("/entity", { entity_name: "w", entity_type: "wallet" })).body.entity.entity_id;
}

async function balances(id: string) {
  return (await api.get("/entity", { entity_id: id })).body.entity.balances;
}

/** `held` of every entity equals the remaining amounts of its active holds. */
async function expectHeldMatchesHolds() {
  await expectHeldMatches(stack);
}

describe("holds", () => {
  it("captures in parts to two destinations, then the exact remainder ends captured", async () => {
    const source = await entity();
    const d1 = await entity();
    const d2 = await entity();
    await api.post("/entity/fund", { entity_id: source, amount: 1000 });
    const created = await api.post("/hold", { entity_id: source, amount: 600, description: "card auth" });
    expect(created.status).toBe(200);
    expect(created.body).toMatchObject({ status: "success", hold: { amount: 600, status: "held", entity_id: source, captured_amount: 0 } });
    expect(created.body.hold.hold_id).toMatch(/^hold_/);
    expect(await balances(source)).toMatchObject({ posted: 1000, held: 600, available: 400 });
    const holdId = created.body.hold.hold_id;

    const first = await api.post("/hold/capture", { hold_id: holdId, amount: 200, destination_entity_id: d1 });
    expect(first.status).toBe(200);
    expect(first.body.hold).toMatchObject({ status: "partially_captured", captured_amount: 200, amount: 600 });
    expect(first.body.transaction).toMatchObject({ amount: 200 });
    expect(await balances(source)).toMatchObject({ posted: 800, held: 400, available: 400 });
    expect(await balances(d1)).toMatchObject({ posted: 200, available: 200 });

    const second = await api.post("/hold/capture", { hold_id: holdId, amount: 150, destination_entity_id: d2 });
    expect(second.body.hold).toMatchObject({ status: "partially_captured", captured_amount: 350 });
    const over = await api.post("/hold/capture", { hold_id: holdId, amount: 251, destination_entity_id: d2 });
    expect(over.status).toBe(422);
    expect(over.body.error.code).toBe("capture_exceeds_hold");

    const rest = await api.post("/hold/capture", { hold_id: holdId, amount: 250, destination_entity_id: d2 });
    expect(rest.body.hold).toMatchObject({ status: "captured", captured_amount: 600 });
    expect(await balances(source)).toMatchObject({ posted: 400, held: 0, available: 400 });
    expect(await balances(d2)).toMatchObject({ posted: 400 });
    // Each capture's transfer is a posted group with a leg on both entities.
    const group = await api.get("/transaction/group", { transaction_group_id: rest.body.transaction.transaction_group_id });
    expect(group.body.transaction_group.legs.map((l: { entity_id: string; direction: string }) => [l.entity_id, l.direction])).toEqual([
      [source, "debit"],
      [d2, "credit"],
    ]);
    const again = await api.post("/hold/capture", { hold_id: holdId, amount: 1, destination_entity_id: d2 });
    expect(again.body.error.code).toBe("hold_not_active");
    const listed = await api.get("/holds", { entity_id: source, status: "captured" });
    expect(listed.body.holds.map((h: { hold_id: string }) => h.hold_id)).toContain(holdId);
    expect(
      (await api.get("/holds", { entity_id: source, status: "held" })).body.holds.map((h: { hold_id: string }) => h.hold_id),
    ).not.toContain(holdId);
    const unknown = await api.get("/holds", { entity_id: source, status: "expired" });
    expect(unknown.status).toBe(400);
    expect(unknown.body.error).toEqual({
      code: "invalid_request",
      message: "status must be one of held, partially_captured, captured, released",
      details: { parameter: "status" },
    });
    await expectHeldMatchesHolds();
  });

  it("releases the remainder on request and refuses what a hold cannot do", async () => {
    const source = await entity();
    const other = await entity();
    await api.post("/entity/fund", { entity_id: source, amount: 100 });
    const short = await api.post("/hold", { entity_id: source, amount: 101 });
    expect(short.status).toBe(422);
    expect(short.body.error.code).toBe("insufficient_funds");
    const hold = (await api.post("/hold", { entity_id: source, amount: 80 })).body.hold;
    await api.post("/hold/capture", { hold_id: hold.hold_id, amount: 30, destination_entity_id: other });
    const released = await api.post("/hold/release", { hold_id: hold.hold_id });
    expect(released.body.hold).toMatchObject({ status: "released", release_reason: "requested", captured_amount: 30 });
    expect(await balances(source)).toMatchObject({ posted: 70, held: 0, available: 70 });
    expect((await api.post("/hold/release", { hold_id: hold.hold_id })).body.error.code).toBe("hold_not_active");
    expect((await api.post("/hold/capture", { hold_id: hold.hold_id, amount: 1, destination_entity_id: other })).body.error.code).toBe(
      "hold_not_active",
    );
    expect((await api.get("/hold", { hold_id: hold.hold_id })).body.hold.status).toBe("released");

    const eur = (await api.post("/entity", { entity_name: "eur", entity_type: "w", currency_code: "EUR" })).body.entity.entity_id;
    const h2 = (await api.post("/hold", { entity_id: source, amount: 10 })).body.hold;
    const mismatch = await api.post("/hold/capture", { hold_id: h2.hold_id, amount: 5, destination_entity_id: eur });
    expect(mismatch.status).toBe(422);
    expect(mismatch.body.error.code).toBe("currency_mismatch");
    expect((await api.get("/hold", { hold_id: h2.hold_id })).body.hold).toMatchObject({ status: "held", captured_amount: 0 });

    const { api: intruder } = await stack.newAccount("intruder");
    expect((await intruder.get("/hold", { hold_id: h2.hold_id })).status).toBe(404);
    expect((await intruder.post("/hold/release", { hold_id: h2.hold_id })).status).toBe(404);
    expect((await intruder.post("/hold/capture", { hold_id: h2.hold_id, amount: 1, destination_entity_id: other })).status).toBe(404);
    expect((await intruder.get("/holds", { entity_id: source })).status).toBe(404);
    await expectHeldMatchesHolds();
  });

  it("never overdraws or captures more than held under concurrent holds and captures", async () => {
    const source = await entity();
    const sink = await entity();
    await api.post("/entity/fund", { entity_id: source, amount: 500 });
    const holds = await Promise.all(Array.from({ length: 20 }, () => api.post("/hold", { entity_id: source, amount: 50 })));
    const ok = holds.filter((h) => h.status === 200).map((h) => h.body.hold.hold_id as string);
    expect(ok).toHaveLength(10);
    const captures = await Promise.all(
      ok.flatMap((id) =>
        Array.from({ length: 4 }, () => api.post("/hold/capture", { hold_id: id, amount: 20, destination_entity_id: sink })),
      ),
    );
    expect(captures.filter((c) => c.status === 200)).toHaveLength(20);
    for (const c of captures.filter((c) => c.status !== 200))
      expect(["capture_exceeds_hold", "hold_not_active"]).toContain(c.body.error.code);
    expect(await balances(source)).toMatchObject({ posted: 100, held: 100, available: 0 });
    expect((await balances(sink)).posted).toBe(400);
    await expectHeldMatchesHolds();
  });

  it("answers and announces each of concurrent captures of one hold with the hold as that capture left it", async () => {
    // A capture's completion writes the hold it expects from its intent in one statement; when
    // another capture of the hold completed first it must notice and add to the hold as it is.
    const [source, sink] = [await entity(), await entity()];
    await api.post("/entity/fund", { entity_id: source, amount: 1000 });
    const holdIds: string[] = [];
    for (let i = 0; i < 4; i++) holdIds.push((await api.post("/hold", { entity_id: source, amount: 100 })).body.hold.hold_id);
    const answers = await Promise.all(
      holdIds.flatMap((id) =>
        [10, 20, 30].map((amount) => api.post("/hold/capture", { hold_id: id, amount, destination_entity_id: sink })),
      ),
    );
    expect(answers.map((a) => a.status)).toEqual(Array(12).fill(200));
    for (const id of holdIds) {
      const mine = answers.filter((a) => a.body.hold.hold_id === id).map((a) => a.body.hold.captured_amount as number);
      // Each answer shows the hold after its own capture: three different totals, the last 60.
      expect(new Set(mine).size).toBe(3);
      expect(Math.max(...mine)).toBe(60);
      expect((await api.get("/hold", { hold_id: id })).body.hold).toMatchObject({ captured_amount: 60, status: "partially_captured" });
    }
    await expect
      .poll(
        async () =>
          (await readStream(stack.natsUrl, stack.stream)).filter(
            (s) => s.event.type === "hold.captured" && s.event.data.case === "hold" && holdIds.includes(s.event.data.value.holdId),
          ).length,
      )
      .toBe(12);
    const events = (await readStream(stack.natsUrl, stack.stream)).filter(
      (s) => s.event.type === "hold.captured" && s.event.data.case === "hold" && holdIds.includes(s.event.data.value.holdId),
    );
    for (const id of holdIds) {
      const totals = events
        .filter((e) => e.event.data.case === "hold" && e.event.data.value.holdId === id)
        .map((e) => (e.event.data.case === "hold" ? Number(e.event.data.value.capturedAmount) : 0));
      expect(totals.sort((a, b) => a - b)).toEqual(
        answers
          .filter((a) => a.body.hold.hold_id === id)
          .map((a) => a.body.hold.captured_amount as number)
          .sort((a, b) => a - b),
      );
    }
    expect(await balances(source)).toMatchObject({ posted: 760, held: 160 });
    expect((await balances(sink)).posted).toBe(240);
    await expectHeldMatchesHolds();
  });

  it("releases an expired hold by itself, with reason expired, and emits every hold event once", async () => {
    const source = await entity();
    await api.post("/entity/fund", { entity_id: source, amount: 100 });
    const hold = (await api.post("/hold", { entity_id: source, amount: 40, expires_at: new Date(Date.now() + 2_000).toISOString() })).body
      .hold;
    expect((await balances(source)).available).toBe(60);
    await expect
      .poll(async () => (await api.get("/hold", { hold_id: hold.hold_id })).body.hold.status, { timeout: 10_000 })
      .toBe("released");
    expect((await api.get("/hold", { hold_id: hold.hold_id })).body.hold.release_reason).toBe("expired");
    expect(await balances(source)).toMatchObject({ held: 0, available: 100 });
    await expect
      .poll(async () =>
        (await readStream(stack.natsUrl, stack.stream))
          .filter((s) => s.event.data.case === "hold" && s.event.data.value.holdId === hold.hold_id)
          .map((s) => s.event.type),
      )
      .toContain("hold.released");
    const events = (await readStream(stack.natsUrl, stack.stream)).filter((s) => s.event.type.startsWith("hold."));
    const ids = events.map((e) => e.msgId);
    expect(new Set(ids).size).toBe(ids.length);
    const mine = events.filter((e) => e.event.data.case === "hold" && e.event.data.value.holdId === hold.hold_id).map((e) => e.event.type);
    expect(mine.sort()).toEqual(["hold.created", "hold.released"]);
    // This hold's release: an earlier test released another hold on request.
    const released = events.find(
      (e) => e.event.type === "hold.released" && e.event.data.case === "hold" && e.event.data.value.holdId === hold.hold_id,
    );
    // Both forms: the enums, and the words the previous version reads (docs/operations.md#upgrade-notes).
    expect(released?.event.data.value).toMatchObject({
      status: "released",
      holdStatus: HoldStatus.RELEASED,
      releaseReason: "expired",
      holdReleaseReason: HoldReleaseReason.EXPIRED,
      currencyCode: "USD",
    });
    await expectHeldMatchesHolds();
  });

  it("replays a keyed hold creation instead of reserving twice", async () => {
    const source = await entity();
    await api.post("/entity/fund", { entity_id: source, amount: 100 });
    const key = { "idempotency-key": `hold-${Date.now()}` };
    const [a, b] = await Promise.all([
      api.post("/hold", { entity_id: source, amount: 30 }, key),
      api.post("/hold", { entity_id: source, amount: 30 }, key),
    ]);
    expect(a.status).toBe(200);
    expect(b.status).toBe(200);
    expect(a.body.hold.hold_id).toBe(b.body.hold.hold_id);
    expect((await balances(source)).held).toBe(30);
    expect((await api.post("/hold", { entity_id: source, amount: 31 }, key)).body.error.code).toBe("idempotency_conflict");
    await expectHeldMatchesHolds();
  });

  it("replays a keyed capture, also when sent twice at once, and refuses the key with another amount", async () => {
    const [source, sink] = [await entity(), await entity()];
    await api.post("/entity/fund", { entity_id: source, amount: 100 });
    const holdId = (await api.post("/hold", { entity_id: source, amount: 60 })).body.hold.hold_id;
    const key = { "idempotency-key": `capture-${Date.now()}` };
    const capture = (amount: number) => api.post("/hold/capture", { hold_id: holdId, amount, destination_entity_id: sink }, key);
    const [a, b] = await Promise.all([capture(25), capture(25)]);
    expect([a.status, b.status]).toEqual([200, 200]);
    expect(a.body.transaction.transaction_group_id).toMatch(/^trx-grp_/);
    expect(b.body.transaction.transaction_group_id).toBe(a.body.transaction.transaction_group_id);
    expect((await capture(25)).body.transaction.transaction_group_id).toBe(a.body.transaction.transaction_group_id);
    expect((await capture(26)).body.error.code).toBe("idempotency_conflict");
    // Once only: 25 of the 60 moved, the hold shows it, and 35 stay held.
    expect((await api.get("/hold", { hold_id: holdId })).body.hold).toMatchObject({ captured_amount: 25, status: "partially_captured" });
    expect(await balances(sink)).toMatchObject({ posted: 25 });
    expect(await balances(source)).toMatchObject({ posted: 75, held: 35, available: 40 });
    await expectHeldMatchesHolds();
  });
});
