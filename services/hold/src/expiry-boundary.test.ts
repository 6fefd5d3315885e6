import { ConnectError, createClient, type Client } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { errorCodeOf } from "@ledger/common";
import { expectHeldMatches, startStack, type Stack } from "@ledger/e2e";
import { HoldService } from "@ledger/proto/hold/v1/hold_pb.js";
import { afterAll, beforeAll, expect, it } from "vitest";

// From expires_at on, a capture or a release answers hold_not_active as if the expiry had already
// run, whether or not it has; of a release and the expiry racing, the first to commit wins
// (docs/api.md, docs/architecture.md#hold-intents-and-recovery). The stack's own hold process
// looks for due holds only once a minute, so a test decides when expiry runs: by starting a
// replica that looks often.

let stack: Stack;
let rpc: Client<typeof HoldService>;
let headers: Record<string, string>;

beforeAll(async () => {
  stack = await startStack({ holdExpiryIntervalMs: 60_000 });
  rpc = createClient(HoldService, createConnectTransport({ baseUrl: stack.hold!.server.url, httpVersion: "2", useBinaryFormat: true }));
  headers = { authorization: stack.account.api_key };
});
afterAll(async () => stack?.close());

async function entity(funds: number): Promise<string> {
  const id = (await stack.api.post("/entity", { entity_name: "w", entity_type: "wallet" })).body.entity.entity_id as string;
  if (funds > 0) await stack.api.post("/entity/fund", { entity_id: id, amount: funds });
  return id;
}

async function balances(id: string) {
  return (await stack.api.get("/entity", { entity_id: id })).body.entity.balances;
}

async function holdRow(id: string) {
  const [row] = await stack.holdSql()<{ status: string; release_reason: string | null; captured_amount: bigint }[]>`
    select status, release_reason, captured_amount from holds where id = ${id}`;
  return row!;
}

/** The error code and details an RPC call was refused with. */
async function refusal(call: Promise<unknown>) {
  return call.then(
    () => ({ code: "none" }),
    (err: unknown) => errorCodeOf(ConnectError.from(err)),
  );
}

it("refuses a capture and a release after expires_at, through REST and RPC, before the expiry has run, and moves nothing", async () => {
  const source = await entity(100);
  const sink = await entity(0);
  // Far enough ahead for the early release below to come first on a busy machine.
  const expiresAt = new Date(Date.now() + 2_000).toISOString();
  const hold = (await stack.api.post("/hold", { entity_id: source, amount: 40, expires_at: expiresAt })).body.hold;
  // A release before expires_at, with a key: its replay after expires_at answers its first success.
  const early = (await stack.api.post("/hold", { entity_id: source, amount: 10, expires_at: expiresAt })).body.hold;
  const key = { "idempotency-key": `early-release-${Date.now()}` };
  const released = await stack.api.post("/hold/release", { hold_id: early.hold_id }, key);
  expect(released.body.hold).toMatchObject({ status: "released", release_reason: "requested" });

  // By the hold database's clock, the one the service compares expires_at with.
  await expect
    .poll(async () => {
      const [row] = await stack.holdSql()<{ due: boolean }[]>`select expires_at <= now() as due from holds where id = ${hold.hold_id}`;
      return row!.due;
    })
    .toBe(true);

  const expired = { code: "hold_not_active", details: { status: "released" } };
  const capture = await stack.api.post("/hold/capture", { hold_id: hold.hold_id, amount: 10, destination_entity_id: sink });
  expect(capture.status).toBe(422);
  expect(capture.body.error).toMatchObject(expired);
  const release = await stack.api.post("/hold/release", { hold_id: hold.hold_id });
  expect(release.status).toBe(422);
  expect(release.body.error).toMatchObject(expired);
  expect(await refusal(rpc.captureHold({ holdId: hold.hold_id, amount: 10n, destinationEntityId: sink }, { headers }))).toMatchObject(
    expired,
  );
  expect(await refusal(rpc.releaseHold({ holdId: hold.hold_id }, { headers }))).toMatchObject(expired);
  const replay = await stack.api.post("/hold/release", { hold_id: early.hold_id }, key);
  expect(replay.status).toBe(200);
  expect(replay.headers.get("idempotent-replayed")).toBe("true");
  expect(replay.body).toEqual(released.body);

  // Nothing moved: the hold is as it was, the money still held, no capture recorded.
  expect(await holdRow(hold.hold_id)).toEqual({ status: "held", release_reason: null, captured_amount: 0n });
  const [captures] = await stack.holdSql()<{ n: bigint }[]>`select count(*)::int8 as n from captures where hold_id = ${hold.hold_id}`;
  expect(captures!.n).toBe(0n);
  expect(await balances(source)).toMatchObject({ posted: 100, held: 40, available: 60 });
  expect(await balances(sink)).toMatchObject({ posted: 0 });
  await expectHeldMatches(stack);

  // The expiry releases it, as it would have at expires_at.
  const sweeper = await stack.startHoldReplica({ expiryIntervalMs: 50 });
  await expect.poll(() => holdRow(hold.hold_id)).toEqual({ status: "released", release_reason: "expired", captured_amount: 0n });
  expect(await balances(source)).toMatchObject({ posted: 100, held: 0, available: 100 });
  await expectHeldMatches(stack);
  await sweeper.close();
});

it("lets the first of a release and the expiry to commit win, and never answers a release with reason expired", async () => {
  const sweeper = await stack.startHoldReplica({ expiryIntervalMs: 50 });
  const count = 50;
  const source = await entity(count * 10);
  // Far enough ahead for 50 creations on a busy machine.
  const expiresAt = Date.now() + 5_000;
  const holds = await Promise.all(
    Array.from({ length: count }, async () => {
      const res = await stack.api.post("/hold", { entity_id: source, amount: 10, expires_at: new Date(expiresAt).toISOString() });
      expect(res.body).toMatchObject({ status: "success" });
      return res.body.hold.hold_id as string;
    }),
  );
  expect(new Set(holds).size).toBe(count);
  expect(Date.now()).toBeLessThan(expiresAt - 100);

  // Releases from 250 ms before expires_at to 240 ms after it, half through REST and half through
  // RPC, while the sweeper looks for due holds every 50 ms and releases them one after another.
  const answers = await Promise.all(
    holds.map(async (holdId, i): Promise<{ holdId: string; reason?: string; code?: string }> => {
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, expiresAt - 250 + i * 10 - Date.now())));
      if (i % 2 === 0) {
        const res = await stack.api.post("/hold/release", { hold_id: holdId });
        return res.status === 200 ? { holdId, reason: res.body.hold.release_reason } : { holdId, code: res.body.error.code };
      }
      return rpc.releaseHold({ holdId }, { headers }).then(
        (res) => ({ holdId, reason: res.hold!.releaseReason }),
        (err: unknown) => ({ holdId, code: errorCodeOf(ConnectError.from(err)).code }),
      );
    }),
  );

  // Every hold ends released: by its release when that committed first, else by the expiry.
  await expect
    .poll(async () => {
      const rows = await stack.holdSql()<{ n: bigint }[]>`
        select count(*)::int8 as n from holds where id in ${stack.holdSql()(holds)} and status = 'released'`;
      return rows[0]!.n;
    })
    .toBe(BigInt(count));
  for (const answer of answers) {
    const row = await holdRow(answer.holdId);
    if (answer.reason !== undefined) {
      expect(answer).toEqual({ holdId: answer.holdId, reason: "requested" });
      expect(row).toMatchObject({ status: "released", release_reason: "requested" });
    } else {
      expect(answer).toEqual({ holdId: answer.holdId, code: "hold_not_active" });
      expect(row).toMatchObject({ status: "released", release_reason: "expired" });
    }
  }
  expect(await balances(source)).toMatchObject({ posted: count * 10, held: 0, available: count * 10 });
  await expectHeldMatches(stack);
  await sweeper.close();
});
