import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import { isoMicros, parseIsoTime, timestampOfMicros } from "@ledger/common";
import { ledgerViolations, startStack, type Api, type Stack } from "@ledger/e2e";
import type { LedgerService } from "@ledger/proto/ledger/v1/ledger_pb.js";
import type { Client } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

// Balances over time (docs/api.md#balances-over-time) on a real Postgres and NATS, over REST and
// RPC: an entity's balances as of a moment equal what a plain read answered then, and statements
// list exactly the legs posted in their window, each with the posted balance after it, adding up
// from the opening balance to the closing one across pages.

let stack: Stack;
let api: Api;
let rpc: Client<typeof LedgerService>;

beforeAll(async () => {
  stack = await startStack();
  api = stack.api;
  rpc = stack.ledgerClient(stack.account.api_key);
});
afterAll(async () => stack?.close());

type Balances = { posted: number; pending_debits: number; pending_credits: number; held: number; available: number };
interface Entry {
  transaction_id: string;
  transaction_group_id: string;
  direction: "debit" | "credit";
  amount: number;
  description: string;
  posted_at: string;
  posted_after: number;
}

async function entity(name = "wallet"): Promise<string> {
  const res = await api.post("/entity", { entity_name: name, entity_type: "wallet" });
  expect(res.status).toBe(200);
  return res.body.entity.entity_id;
}

async function ok(path: string, body: Record<string, unknown>) {
  const res = await api.post(path, body);
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body;
}

async function balances(entityId: string, asOf?: string): Promise<Balances> {
  const res = await api.get("/entity", { entity_id: entityId, ...(asOf ? { as_of: asOf } : {}) });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body.entity.balances;
}

/** The database's clock now, to the microsecond: after every write answered so far, before any sent later. */
async function now(): Promise<string> {
  const [row] = await stack.sql<{ us: bigint }[]>`select (extract(epoch from clock_timestamp()) * 1000000)::int8 as us`;
  return isoMicros(timestampOfMicros(row!.us));
}

/** Every entry of a statement, page by page with `limit`, checking that every page repeats the same window balances. */
async function statement(entityId: string, from: string, to: string, limit: number) {
  const entries: Entry[] = [];
  let cursor: string | undefined;
  let first: { opening_posted: number; closing_posted: number } | undefined;
  let pages = 0;
  do {
    const res = await api.get("/entity/statement", {
      entity_id: entityId,
      from,
      to,
      limit: String(limit),
      ...(cursor ? { cursor } : {}),
    });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body.entries.length).toBeLessThanOrEqual(limit);
    first ??= res.body.statement;
    expect(res.body.statement).toEqual(first);
    entries.push(...res.body.entries);
    cursor = res.body.pagination.has_next ? res.body.pagination.next_cursor : undefined;
    pages++;
  } while (cursor);
  return { ...first!, entries, pages };
}

const signed = (e: Entry) => (e.direction === "credit" ? e.amount : -e.amount);

/** Each entry's posted_after is the one before plus its signed amount, from `opening`, in time order; answers the last. */
function expectChain(opening: number, entries: Entry[]): number {
  let posted = opening;
  let previous = "";
  for (const e of entries) {
    posted += signed(e);
    expect(e.posted_after, JSON.stringify(e)).toBe(posted);
    expect(e.posted_at >= previous).toBe(true);
    previous = e.posted_at;
  }
  return posted;
}

describe("GET /entity?as_of=", () => {
  it("answers at each moment what a plain read answered then, for every kind of change, over REST and RPC", async () => {
    const before = await now();
    const a = await entity("a");
    const b = await entity("b");
    const created = await now();
    const moments: Array<{ at: string; a: Balances; b: Balances }> = [];
    const mark = async () => moments.push({ at: await now(), a: await balances(a), b: await balances(b) });

    await ok("/entity/fund", { entity_id: a, amount: 1_000 });
    await mark();
    const pending = await ok("/transaction", { description: "rent", amount: 300, account: { from: a, to: b } });
    await mark();
    const hold = await ok("/hold", { entity_id: a, amount: 200 });
    await mark();
    await ok("/transaction/post", { transaction_group_id: pending.transaction_group_id });
    await mark();
    await ok("/hold/capture", { hold_id: hold.hold.hold_id, amount: 150, destination_entity_id: b });
    await mark();
    const posted = await ok("/transaction", { description: "tip", amount: 40, status: "posted", account: { from: b, to: a } });
    await mark();
    await ok("/transaction/reverse", { transaction_group_id: posted.transaction_group_id });
    await mark();
    await ok("/hold/release", { hold_id: hold.hold.hold_id });
    await mark();
    // A moment in ISO 8601 with milliseconds and an offset, a second away from any write.
    await new Promise((resolve) => setTimeout(resolve, 1_100));
    const quiet = new Date();
    const offset = `${new Date(quiet.getTime() + 3_600_000).toISOString().slice(0, -1)}+01:00`;
    await new Promise((resolve) => setTimeout(resolve, 1_100));
    await ok("/entity/defund", { entity_id: a, amount: 10 });

    // Every write changed what a plain read answered, so each moment is told apart from the one before.
    moments.forEach((m, i) => {
      if (i > 0) expect([m.a, m.b]).not.toEqual([moments[i - 1]!.a, moments[i - 1]!.b]);
    });
    for (const m of moments) {
      expect(await balances(a, m.at), m.at).toEqual(m.a);
      expect(await balances(b, m.at), m.at).toEqual(m.b);
      const { entity: viaRpc } = await rpc.getEntity({ entityId: a, asOf: parseIsoTime(m.at)! });
      expect(viaRpc!.balances).toMatchObject({
        posted: BigInt(m.a.posted),
        pendingDebits: BigInt(m.a.pending_debits),
        pendingCredits: BigInt(m.a.pending_credits),
        held: BigInt(m.a.held),
        available: BigInt(m.a.available),
      });
    }
    const last = moments[moments.length - 1]!;
    expect(await balances(a, offset)).toEqual(last.a);
    expect(await balances(a, quiet.toISOString())).toEqual(last.a);
    expect((await balances(a)).posted).toBe(last.a.posted - 10);

    // Before the entity's first change, and before it existed: zeros; the entity itself as it is now.
    const zeros = { posted: 0, pending_debits: 0, pending_credits: 0, held: 0, available: 0 };
    expect(await balances(a, created)).toEqual(zeros);
    const early = await api.get("/entity", { entity_id: a, as_of: before });
    expect(early.body.entity).toMatchObject({ entity_id: a, entity_name: "a", balances: zeros });
    expect(await balances(a, "1970-01-01T00:00:00Z")).toEqual(zeros);
    expect(await ledgerViolations(stack.sql, stack.account.account_id)).toEqual([]);
  });

  it("answers 400 for a moment in the future or a time that is not ISO 8601 with a zone, over REST and RPC", async () => {
    const a = await entity();
    const future = await api.get("/entity", { entity_id: a, as_of: new Date(Date.now() + 60_000).toISOString() });
    expect(future.status).toBe(400);
    expect(future.body.error).toMatchObject({ code: "invalid_request", details: { field: "as_of" } });
    for (const bad of [
      "yesterday",
      "",
      "2026-01-01",
      "2026-01-01T00:00:00",
      "2026-13-01T00:00:00Z",
      "2026-02-30T00:00:00Z",
      "2026-01-01T24:00:00Z",
      "10000-01-01T00:00:00Z",
      "2026-01-01T00:00:00.1234567890Z",
    ]) {
      const res = await api.get("/entity", { entity_id: a, as_of: bad });
      expect(res.status, bad).toBe(400);
      expect(res.body.error, bad).toMatchObject({ code: "invalid_request", details: { parameter: "as_of" } });
    }
    const rpcFuture = await rpc
      .getEntity({ entityId: a, asOf: timestampFromDate(new Date(Date.now() + 60_000)) })
      .catch((e: unknown) => ConnectError.from(e));
    expect(rpcFuture).toMatchObject({ code: Code.InvalidArgument });
    const rpcNanos = await rpc
      .getEntity({ entityId: a, asOf: { seconds: 1n, nanos: 2_000_000_000 } })
      .catch((e: unknown) => ConnectError.from(e));
    expect(rpcNanos).toMatchObject({ code: Code.InvalidArgument });
  });
});

describe("GET /entity/statement", () => {
  it("lists the legs as they become posted, with exact balances after each, across pages", async () => {
    const a = await entity("a");
    const b = await entity("b");
    const start = await now();
    await ok("/entity/fund", { entity_id: a, amount: 1_000, description: "salary" });
    const pending = await ok("/transaction", { description: "rent", amount: 100, account: { from: a, to: b } });
    const canceled = await ok("/transaction", { description: "never", amount: 5, account: { from: a, to: b } });
    const middle = await now();
    const posted = await ok("/transaction", { description: "coffee", amount: 50, status: "posted", account: { from: a, to: b } });
    await ok("/transaction", {
      description: "split",
      status: "posted",
      entries: [
        { entity_id: a, direction: "debit", amount: 30 },
        { entity_id: a, direction: "credit", amount: 10 },
        { entity_id: b, direction: "credit", amount: 20 },
      ],
    });
    await ok("/transaction/reverse", { transaction_group_id: posted.transaction_group_id });
    const hold = await ok("/hold", { entity_id: a, amount: 200 });
    await ok("/hold/capture", { hold_id: hold.hold.hold_id, amount: 120, destination_entity_id: b, description: "capture" });
    await ok("/transaction/cancel", { transaction_group_id: canceled.transaction_group_id });
    await ok("/transaction/post", { transaction_group_id: pending.transaction_group_id });
    const end = await now();
    await ok("/entity/fund", { entity_id: a, amount: 7 });

    const whole = await statement(a, start, end, 2);
    expect(whole.pages).toBe(4);
    expect(whole.opening_posted).toBe(0);
    expect(whole.entries.map((e) => [e.description, e.direction, e.amount])).toEqual([
      ["salary", "credit", 1_000],
      ["coffee", "debit", 50],
      ["split", "debit", 30],
      ["split", "credit", 10],
      [`Reversal of ${posted.transaction_group_id}`, "credit", 50],
      ["capture", "debit", 120],
      // The pending transfer at its posting, not its creation; the canceled one never.
      ["rent", "debit", 100],
    ]);
    expect(whole.entries.at(-1)!.transaction_group_id).toBe(pending.transaction_group_id);
    expect(expectChain(whole.opening_posted, whole.entries)).toBe(whole.closing_posted);
    expect(whole.closing_posted).toBe(760);
    expect((await balances(a, end)).posted).toBe(whole.closing_posted);
    expect((await balances(a)).posted).toBe(767);
    // Every page's moments are to the microsecond.
    expect(whole.entries[0]!.posted_at).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/);

    // A window from the middle: its opening is the balance as of then, and it adds up to its closing.
    const later = await statement(a, middle, end, 100);
    expect(later.pages).toBe(1);
    expect(later.opening_posted).toBe((await balances(a, middle)).posted);
    expect(later.opening_posted).toBe(1_000);
    expect(later.entries).toEqual(whole.entries.slice(1));
    expect(expectChain(later.opening_posted, later.entries)).toBe(later.closing_posted);

    // A window starting exactly at a leg's moment includes it; the one ending there does not.
    const at = whole.entries[1]!.posted_at;
    expect((await statement(a, at, end, 100)).entries[0]).toEqual(whole.entries[1]);
    const upTo = await statement(a, start, at, 100);
    expect(upTo.entries).toEqual(whole.entries.slice(0, 1));
    expect(upTo.closing_posted).toBe(1_000);

    // The same page over RPC.
    const viaRpc = await rpc.getEntityStatement({ entityId: a, from: parseIsoTime(start)!, to: parseIsoTime(end)!, limit: 3 });
    expect(viaRpc.statement).toMatchObject({ entityId: a, currencyCode: "USD", openingPosted: 0n, closingPosted: 760n });
    expect(viaRpc.entries.map((e) => [e.transactionId, e.postedAfter, isoMicros(e.postedAt!)])).toEqual(
      whole.entries.slice(0, 3).map((e) => [e.transaction_id, BigInt(e.posted_after), e.posted_at]),
    );
    expect(viaRpc.page).toMatchObject({ limit: 3, hasNext: true });
    expect(await ledgerViolations(stack.sql, stack.account.account_id)).toEqual([]);
  });

  it("keeps every posted_after chain exact under many concurrent writes on one entity", async () => {
    const hot = await entity("hot");
    const others = await Promise.all(Array.from({ length: 5 }, (_, i) => entity(`other ${i}`)));
    for (const other of others) await ok("/entity/fund", { entity_id: other, amount: 1_000 });
    const start = await now();
    await ok("/entity/fund", { entity_id: hot, amount: 1_000_000 });
    const transfers = Array.from({ length: 120 }, (_, i) => {
      const other = others[i % others.length]!;
      const [from, to] = i % 3 === 0 ? [other, hot] : [hot, other];
      return api.post("/transaction", { description: `t${i}`, amount: 1 + (i % 7), status: "posted", account: { from, to } });
    });
    const deposits = Array.from({ length: 40 }, () => api.post("/entity/fund", { entity_id: hot, amount: 3 }));
    const batch = api.post("/transaction/batch", {
      transactions: others.map((to, i) => ({ description: `b${i}`, amount: 2, status: "posted", account: { from: hot, to } })),
    });
    const answers = await Promise.all([...transfers, ...deposits, batch]);
    for (const res of answers) expect(res.status, JSON.stringify(res.body)).toBe(200);
    const end = await now();

    const hotStatement = await statement(hot, start, end, 1_000);
    expect(hotStatement.entries).toHaveLength(1 + 120 + 40 + others.length);
    expect(new Set(hotStatement.entries.map((e) => e.transaction_id)).size).toBe(hotStatement.entries.length);
    expect(expectChain(0, hotStatement.entries)).toBe((await balances(hot)).posted);
    // The external entity took every deposit as a delta, concurrently: its chain is exact too.
    const external = (await api.get("/program")).body.program.external_entity_id as string;
    const externalStatement = await statement(external, "1970-01-01T00:00:00Z", end, 1_000);
    expect(expectChain(externalStatement.opening_posted, externalStatement.entries)).toBe((await balances(external)).posted);
    // Each moment's as-of balance is the chain's balance after that moment's last leg.
    const afterEach = new Map(hotStatement.entries.map((e) => [e.posted_at, e.posted_after]));
    for (const [at, posted] of [...afterEach].filter((_, i) => i % 10 === 0)) {
      const stamp = parseIsoTime(at)!;
      const justAfter = isoMicros(timestampOfMicros(stamp.seconds * 1_000_000n + BigInt(stamp.nanos / 1000) + 1n));
      expect((await balances(hot, justAfter)).posted, at).toBe(posted);
    }
    expect(await ledgerViolations(stack.sql, stack.account.account_id)).toEqual([]);
  });

  it("pages through the legs of one write, which share a moment, adding up across every page boundary", async () => {
    const payer = await entity("payer");
    const payees = await Promise.all(Array.from({ length: 3 }, (_, i) => entity(`payee ${i}`)));
    const start = await now();
    await ok("/entity/fund", { entity_id: payer, amount: 1_000, description: "seed" });
    const batch = await ok("/transaction/batch", {
      transactions: Array.from({ length: 7 }, (_, i) => ({
        description: `part ${i}`,
        amount: i + 1,
        status: "posted",
        account: { from: payer, to: payees[i % payees.length] },
      })),
    });
    expect(batch.succeeded).toBe(7);
    const end = await now();
    await ok("/entity/fund", { entity_id: payer, amount: 5 });

    const whole = await statement(payer, start, end, 1_000);
    expect(whole.pages).toBe(1);
    expect(whole.entries.map((e) => e.description)).toEqual(["seed", ...Array.from({ length: 7 }, (_, i) => `part ${i}`)]);
    // The seven legs of the batch were posted by one write: one moment, told apart only by their place in it.
    const moment = whole.entries[1]!.posted_at;
    expect(new Set(whole.entries.slice(1).map((e) => e.posted_at))).toEqual(new Set([moment]));
    expect(expectChain(whole.opening_posted, whole.entries)).toBe(whole.closing_posted);
    expect(whole.closing_posted).toBe(1_000 - 28);

    // Every page size puts page boundaries inside that moment: the pages still hold each leg once, in order.
    for (const limit of [1, 2, 3, 5, 7]) {
      const paged = await statement(payer, start, end, limit);
      expect(paged.pages, `limit ${limit}`).toBe(Math.ceil(whole.entries.length / limit));
      expect(paged.entries, `limit ${limit}`).toEqual(whole.entries);
      expect([paged.opening_posted, paged.closing_posted]).toEqual([whole.opening_posted, whole.closing_posted]);
    }
    // A window from that moment holds all seven legs; one ending there none of them.
    const fromMoment = await statement(payer, moment, end, 3);
    expect(fromMoment.entries).toEqual(whole.entries.slice(1));
    expect(fromMoment.opening_posted).toBe(1_000);
    const toMoment = await statement(payer, start, moment, 3);
    expect(toMoment.entries).toEqual(whole.entries.slice(0, 1));
    expect(toMoment.closing_posted).toBe(1_000);
  });

  it("answers 404 for another account's entity on both paths, over REST and RPC", async () => {
    const a = await entity();
    await ok("/entity/fund", { entity_id: a, amount: 10 });
    const { api: other, account } = await stack.newAccount();
    const window = { entity_id: a, from: "2020-01-01T00:00:00Z", to: await now() };
    for (const res of [await other.get("/entity", { entity_id: a, as_of: window.to }), await other.get("/entity/statement", window)]) {
      expect(res.status).toBe(404);
      expect(res.body.error.code).toBe("not_found");
    }
    const theirs = stack.ledgerClient(account.api_key);
    // Called one at a time: a second call made before the first is awaited would reject unhandled.
    for (const call of [
      () => theirs.getEntity({ entityId: a, asOf: parseIsoTime(window.to)! }),
      () => theirs.getEntityStatement({ entityId: a, from: parseIsoTime(window.from)!, to: parseIsoTime(window.to)! }),
    ]) {
      expect(await call().catch((e: unknown) => ConnectError.from(e))).toMatchObject({ code: Code.NotFound });
    }
  });

  it("answers 400 for a limit out of bounds, a bad window, cursor or parameter, over REST and RPC", async () => {
    const a = await entity();
    const window = { entity_id: a, from: "2020-01-01T00:00:00Z", to: "2020-02-01T00:00:00Z" };
    const cases: Array<[Record<string, string>, string]> = [
      [{ ...window, limit: "0" }, "limit"],
      [{ ...window, limit: "1001" }, "limit"],
      [{ ...window, limit: "ten" }, "limit"],
      [{ ...window, cursor: "not a cursor" }, ""],
      [{ ...window, cursor: Buffer.from(JSON.stringify({ t: "-5", s: 0 })).toString("base64url") }, ""],
      [{ entity_id: a, to: window.to }, "from"],
      [{ entity_id: a, from: window.from }, "to"],
      [{ ...window, from: "last week" }, "from"],
      [{ ...window, to: window.from }, ""],
      [{ ...window, from: window.to, to: window.from }, ""],
      [{ ...window, as_of: window.to }, "as_of"],
    ];
    for (const [query, parameter] of cases) {
      const res = await api.get("/entity/statement", query);
      expect(res.status, JSON.stringify(query)).toBe(400);
      expect(res.body.error.code).toBe("invalid_request");
      if (parameter) expect(res.body.error.details.parameter, JSON.stringify(query)).toBe(parameter);
    }
    const full = await api.get("/entity/statement", { ...window, limit: "1000" });
    expect(full.status).toBe(200);
    expect(full.body).toMatchObject({
      statement: { opening_posted: 0, closing_posted: 0 },
      entries: [],
      pagination: { limit: 1000, has_next: false },
    });
    expect((await api.get("/entity/statement", window)).body.pagination.limit).toBe(100);
    const from = parseIsoTime(window.from)!;
    const to = parseIsoTime(window.to)!;
    for (const request of [
      { entityId: a, from, to, limit: 1001 },
      { entityId: a, from, to, limit: -1 },
      { entityId: a, to },
      { entityId: a, from: to, to: from },
      { entityId: a, from, to, cursor: "%%%" },
    ]) {
      const err = await rpc.getEntityStatement(request).catch((e: unknown) => ConnectError.from(e));
      expect(err, JSON.stringify(Object.keys(request))).toMatchObject({ code: Code.InvalidArgument });
    }
  });
});
