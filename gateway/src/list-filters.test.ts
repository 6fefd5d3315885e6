import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { newId } from "@ledger/common";
import { startStack, type Api, type Stack } from "@ledger/e2e";
import { EntityStatus, TransactionStatus } from "@ledger/proto/ledger/v1/ledger_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

// GET /transaction/groups and the filters of the entity and transaction lists (docs/api.md#filters),
// through REST and RPC on a full stack: what each filter selects, alone and together, newest first,
// in pages that join up, and only ever the caller's own rows. Refusals of filters out of bounds are
// list-filters.handlers.test.ts.

let stack: Stack;

beforeAll(async () => {
  stack = await startStack();
});
afterAll(async () => stack?.close());

/** A fresh account (its default program holds only what the test makes), over REST and RPC. */
async function tenant() {
  const { account, api } = await stack.newAccount("search");
  const rpc = stack.ledgerClient(account.api_key);
  const entity = async (extra: Record<string, unknown> = {}) => {
    const res = await api.post("/entity", { entity_name: "Wallet", entity_type: "customer", ...extra });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    return res.body.entity as { entity_id: string; created_at: string };
  };
  const alice = (await entity()).entity_id;
  const bob = (await entity()).entity_id;
  expect((await api.post("/entity/fund", { entity_id: alice, amount: 1_000_000 })).status).toBe(200);
  /** A posted transfer from Alice to Bob with `metadata`; answers its group as GET /transaction/group shows it. */
  const group = async (metadata?: Record<string, unknown>, status = "posted") => {
    const res = await api.post("/transaction", {
      description: "Search",
      status,
      amount: 1,
      account: { from: alice, to: bob },
      ...(metadata ? { metadata } : {}),
    });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    const read = await api.get("/transaction/group", { transaction_group_id: res.body.transaction_group_id });
    return read.body.transaction_group as { transaction_group_id: string; created_at: string; status: string };
  };
  return { api, rpc, alice, bob, entity, group };
}

/** Ids of a list answer's rows. */
function idsOf(res: { status: number; body: { [list: string]: Array<Record<string, string>> } }, list: string, id: string) {
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body[list]!.map((row) => row[id]!);
}

const groupIds = (res: Awaited<ReturnType<Api["get"]>>) => idsOf(res, "transaction_groups", "transaction_group_id");

/** Every page of a list, following next_cursor; fails on a page that repeats an id. */
async function allPages(api: Api, path: string, query: Record<string, string>, list: string, id: string): Promise<string[]> {
  const seen: string[] = [];
  let cursor: string | null = null;
  for (let pages = 0; pages < 50; pages++) {
    const res = await api.get(path, { ...query, ...(cursor ? { cursor } : {}) });
    const ids = idsOf(res, list, id);
    expect(ids.filter((each) => seen.includes(each))).toEqual([]);
    seen.push(...ids);
    cursor = res.body.pagination.next_cursor;
    expect(res.body.pagination.has_next).toBe(cursor !== null);
    if (!cursor) return seen;
  }
  throw new Error("more than 50 pages");
}

describe("GET /transaction/groups", () => {
  it("lists the program's groups newest first, each exactly as GET /transaction/group shows it", async () => {
    const { api, group } = await tenant();
    const made = [await group({ order: "a" }), await group(undefined, "pending"), await group({ order: "c" })];
    const res = await api.get("/transaction/groups");
    expect(res.status).toBe(200);
    expect(res.body.status).toBe("success");
    // The deposit that funded Alice is a group too, the oldest.
    expect(res.body.transaction_groups.slice(0, 3)).toEqual([...made].reverse());
    expect(res.body.transaction_groups).toHaveLength(4);
    expect(res.body.pagination).toEqual({ limit: 20, has_next: false, next_cursor: null });
  });

  it("walks pages that join up without gaps or repeats, with and without filters", async () => {
    const { api, group } = await tenant();
    const tagged: string[] = [];
    for (let i = 0; i < 7; i++) {
      const made = await group({ batch: i % 2 === 0 ? "even" : "odd" });
      if (i % 2 === 0) tagged.push(made.transaction_group_id);
    }
    const everything = groupIds(await api.get("/transaction/groups", { limit: "100" }));
    expect(everything).toHaveLength(8);
    expect(await allPages(api, "/transaction/groups", { limit: "3" }, "transaction_groups", "transaction_group_id")).toEqual(everything);
    const filtered = await allPages(
      api,
      "/transaction/groups",
      { limit: "2", "metadata[batch]": "even" },
      "transaction_groups",
      "transaction_group_id",
    );
    expect(filtered).toEqual([...tagged].reverse());
  });

  it("matches a top-level string, number or boolean exactly, and several filters together", async () => {
    const { api, group } = await tenant();
    const id = async (metadata: Record<string, unknown>) => (await group(metadata)).transaction_group_id;
    const number5 = await id({ n: 5, tier: "gold" });
    const string5 = await id({ n: "5" });
    const fraction = await id({ n: 5.5 });
    await id({ n: [5] });
    await id({ n: { n: 5 } });
    await id({ nested: { n: 5 } });
    const leadingZero = await id({ n: "05" });
    const yes = await id({ b: true, tier: "gold" });
    const yesText = await id({ b: "true" });
    await id({ b: "TRUE" });
    await id({ b: false });
    const ampersand = await id({ s: "a&b c" });
    const matches = async (query: Record<string, string>) => groupIds(await api.get("/transaction/groups", query)).sort();

    expect(await matches({ "metadata[n]": "5" })).toEqual([number5, string5].sort());
    // Numbers compare by value; a string compares as written.
    expect(await matches({ "metadata[n]": "5.0" })).toEqual([number5]);
    expect(await matches({ "metadata[n]": "5e0" })).toEqual([number5]);
    expect(await matches({ "metadata[n]": "5.5" })).toEqual([fraction]);
    // Not a JSON number: only the string.
    expect(await matches({ "metadata[n]": "05" })).toEqual([leadingZero]);
    expect(await matches({ "metadata[b]": "true" })).toEqual([yes, yesText].sort());
    expect(await matches({ "metadata[s]": "a&b c" })).toEqual([ampersand]);
    expect(await matches({ "metadata[tier]": "gold" })).toEqual([number5, yes].sort());
    expect(await matches({ "metadata[tier]": "gold", "metadata[n]": "5" })).toEqual([number5]);
    expect(await matches({ "metadata[tier]": "gold", "metadata[b]": "true" })).toEqual([yes]);
    expect(await matches({ "metadata[tier]": "silver" })).toEqual([]);
    expect(await matches({ "metadata[missing]": "5" })).toEqual([]);
  });

  it("filters on created_at: created_after inclusive, created_before exclusive, and with status", async () => {
    const { api, group } = await tenant();
    const made: Array<Awaited<ReturnType<typeof group>>> = [];
    for (let i = 0; i < 4; i++) {
      made.push(await group(undefined, i === 2 ? "pending" : "posted"));
      // Distinct milliseconds, so each group has a time of its own to cut at.
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    const [first, second, third, fourth] = made.map((g) => g.transaction_group_id) as [string, string, string, string];
    const at = (i: number) => made[i]!.created_at;
    const list = async (query: Record<string, string>) => groupIds(await api.get("/transaction/groups", query));
    expect(await list({ created_after: at(1) })).toEqual([fourth, third, second]);
    expect(await list({ created_before: at(1) })).toContain(first);
    expect(await list({ created_before: at(1) })).not.toContain(second);
    expect(await list({ created_after: at(1), created_before: at(3) })).toEqual([third, second]);
    expect(await list({ created_after: at(1), created_before: at(3), status: "posted" })).toEqual([second]);
    expect(await list({ created_after: at(1), status: "pending" })).toEqual([third]);
    // The same instant in another zone.
    const shifted = new Date(Date.parse(at(1)) + 3600_000).toISOString().replace("Z", "+01:00");
    expect(await list({ created_after: shifted })).toEqual([fourth, third, second]);
  });

  it("answers the same whether the filters match few rows or more than are sorted whole", async () => {
    const { account, api } = await stack.newAccount("many rows");
    // More groups than MAX_RANGE_CANDIDATES (5,000) in one range and than MAX_METADATA_CANDIDATES
    // (1,000) with one value, straight into the table: one a millisecond from `base`, in an order
    // unrelated to their ids' (7,919 is prime to 6,000), so the pages show that filters select by
    // created_at and metadata while pages follow the ids.
    const base = Date.parse("2026-01-01T00:00:00Z");
    const rows = Array.from({ length: 6_000 }, (_, i) => ({
      id: newId("group"),
      at: new Date(base + ((i * 7_919) % 6_000)),
      metadata: { half: i % 2 === 0 ? "even" : "odd", ...(i % 100 === 0 ? { rare: "yes" } : {}) },
    }));
    await stack.sql`
      insert into transaction_groups (id, account_id, program_id, status, description, metadata, currency_code, amount, created_at, updated_at)
      select id, ${account.account_id}, ${account.program_id}, 'posted', 'seeded',
             jsonb_strip_nulls(jsonb_build_object('half', half, 'rare', rare)), 'USD', 1, at, at
      from unnest(${rows.map((r) => r.id)}::text[], ${rows.map((r) => r.at.toISOString())}::timestamptz[],
                  ${rows.map((r) => r.metadata.half)}::text[], ${rows.map((r) => r.metadata.rare ?? null)}::text[]) as seeded(id, at, half, rare)`;
    const expected = (keep: (row: (typeof rows)[number]) => boolean) =>
      rows
        .filter(keep)
        .map((r) => r.id)
        .sort()
        .reverse();
    const iso = (ms: number) => new Date(base + ms).toISOString();
    const within = (from: number, to: number) => (r: (typeof rows)[number]) => r.at.getTime() >= base + from && r.at.getTime() < base + to;
    const cases: Array<[Record<string, string>, (row: (typeof rows)[number]) => boolean]> = [
      [{ created_after: iso(0), created_before: iso(5_500) }, within(0, 5_500)],
      [{ created_after: iso(100), created_before: iso(300) }, within(100, 300)],
      [{ created_after: iso(4_000) }, within(4_000, 6_000)],
      [{ "metadata[half]": "even" }, (r) => r.metadata.half === "even"],
      [{ "metadata[rare]": "yes" }, (r) => r.metadata.rare === "yes"],
      [{ "metadata[half]": "odd", created_before: iso(3_000) }, (r) => r.metadata.half === "odd" && within(0, 3_000)(r)],
    ];
    for (const [filters, keep] of cases) {
      const query = { ...filters, limit: "100" };
      const first = await api.get("/transaction/groups", query);
      expect(groupIds(first), JSON.stringify(filters)).toEqual(expected(keep).slice(0, 100));
      if (!first.body.pagination.next_cursor) continue;
      const second = await api.get("/transaction/groups", { ...query, cursor: first.body.pagination.next_cursor });
      expect(groupIds(second), JSON.stringify(filters)).toEqual(expected(keep).slice(100, 200));
    }
  });

  it("never shows another account's or another program's groups", async () => {
    const mine = await tenant();
    const theirs = await tenant();
    const own = (await mine.group({ shared: "x" })).transaction_group_id;
    await theirs.group({ shared: "x" });
    const program = await mine.api.post("/program", { program_name: "Other" });
    const other = program.body.program.program_id as string;
    const elsewhere = await mine.api.post("/entity", { entity_name: "Other", entity_type: "customer" }, { program_id: other });
    await mine.api.post("/entity/fund", { entity_id: elsewhere.body.entity.entity_id, amount: 5 }, { program_id: other });
    expect(groupIds(await mine.api.get("/transaction/groups", { "metadata[shared]": "x" }))).toEqual([own]);
    const all = groupIds(await mine.api.get("/transaction/groups", { limit: "100" }));
    expect(all).toContain(own);
    expect(all).toHaveLength(2);
    expect(groupIds(await mine.api.get("/transaction/groups", {}, { program_id: other }))).toHaveLength(1);
    // Another account's program is not found, as everywhere.
    expect((await theirs.api.get("/transaction/groups", {}, { program_id: other })).status).toBe(404);
  });
});

describe("GET /entities filters", () => {
  it("selects by status, created_at and metadata, alone and together, newest first", async () => {
    const { api, entity } = await tenant();
    const gold = await entity({ metadata: { tier: "gold", score: 10 } });
    await new Promise((resolve) => setTimeout(resolve, 5));
    const silver = await entity({ metadata: { tier: "silver", score: "10" } });
    await new Promise((resolve) => setTimeout(resolve, 5));
    const frozen = await entity({ metadata: { tier: "gold", vip: true } });
    expect((await api.post("/entity/freeze", { entity_id: frozen.entity_id, reason: "check" })).status).toBe(200);
    const list = async (query: Record<string, string>) => idsOf(await api.get("/entities", query), "entities", "entity_id");

    expect(await list({ "metadata[tier]": "gold" })).toEqual([frozen.entity_id, gold.entity_id]);
    expect(await list({ "metadata[score]": "10" })).toEqual([silver.entity_id, gold.entity_id]);
    expect(await list({ "metadata[vip]": "true" })).toEqual([frozen.entity_id]);
    expect(await list({ status: "frozen" })).toEqual([frozen.entity_id]);
    expect(await list({ status: "active", "metadata[tier]": "gold" })).toEqual([gold.entity_id]);
    expect(await list({ created_after: silver.created_at })).toEqual([frozen.entity_id, silver.entity_id]);
    expect(await list({ created_after: gold.created_at, created_before: frozen.created_at, "metadata[tier]": "silver" })).toEqual([
      silver.entity_id,
    ]);
    expect(await list({ status: "closed" })).toEqual([]);
  });
});

describe("GET /entities name filter", () => {
  it("matches names containing the text in any case, alone and with status, metadata and created_at", async () => {
    const { api, rpc, entity } = await tenant();
    const jane = await entity({ entity_name: "Jane Smith", metadata: { tier: "gold" } });
    await new Promise((resolve) => setTimeout(resolve, 5));
    const smithy = await entity({ entity_name: "SMITHY & Co", metadata: { tier: "silver" } });
    await new Promise((resolve) => setTimeout(resolve, 5));
    const blacksmith = await entity({ entity_name: "blacksmith 50%_off", metadata: { tier: "gold" } });
    expect((await api.post("/entity/freeze", { entity_id: smithy.entity_id, reason: "check" })).status).toBe(200);
    const list = async (query: Record<string, string>) => idsOf(await api.get("/entities", query), "entities", "entity_id");

    expect(await list({ name: "smith" })).toEqual([blacksmith.entity_id, smithy.entity_id, jane.entity_id]);
    expect(await list({ name: "  SMITH  " })).toEqual([blacksmith.entity_id, smithy.entity_id, jane.entity_id]);
    // A text in the middle of the name, and one too short for a trigram (read by walking the ids).
    expect(await list({ name: "ksmi" })).toEqual([blacksmith.entity_id]);
    expect(await list({ name: "e s" })).toEqual([jane.entity_id]);
    // LIKE's wildcards are literal characters: "%" and "_" match only themselves.
    expect(await list({ name: "50%_" })).toEqual([blacksmith.entity_id]);
    expect(await list({ name: "5_%" })).toEqual([]);
    expect(await list({ name: "%" })).toEqual([blacksmith.entity_id]);
    expect(await list({ name: "nobody" })).toEqual([]);
    expect(await list({ name: "smith", status: "frozen" })).toEqual([smithy.entity_id]);
    expect(await list({ name: "smith", status: "active", "metadata[tier]": "gold" })).toEqual([blacksmith.entity_id, jane.entity_id]);
    expect(await list({ name: "smith", "metadata[tier]": "silver" })).toEqual([smithy.entity_id]);
    expect(await list({ name: "smith", created_after: smithy.created_at })).toEqual([blacksmith.entity_id, smithy.entity_id]);

    const overRpc = await rpc.listEntities({ name: "SMITH", status: EntityStatus.ACTIVE, metadata: { tier: "gold" } });
    expect(overRpc.entities.map((e) => e.entityId)).toEqual([blacksmith.entity_id, jane.entity_id]);
    expect((await rpc.listEntities({ name: "jane s" })).entities.map((e) => e.entityName)).toEqual(["Jane Smith"]);
  });

  it("pages through many matches, whether they are sorted whole or found by walking the ids", async () => {
    const { account, api } = await stack.newAccount("many names");
    const rpc = stack.ledgerClient(account.api_key);
    // 1,500 entities straight into the table, more than MAX_METADATA_CANDIDATES (1,000) named
    // "Customer …", of which every 50th is also "… Rare …": the first is found by walking the ids,
    // the second sorted from its candidates.
    const rows = Array.from({ length: 1_500 }, (_, i) => ({ id: newId("entity"), name: `Customer ${i % 50 === 0 ? "Rare " : ""}${i}` }));
    await stack.sql`
      insert into entities (id, account_id, program_id, name, type, currency_code)
      select id, ${account.account_id}, ${account.program_id}, name, 'customer', 'USD'
      from unnest(${rows.map((r) => r.id)}::text[], ${rows.map((r) => r.name)}::text[]) as seeded(id, name)`;
    const expected = (text: string) =>
      rows
        .filter((r) => r.name.toLowerCase().includes(text))
        .map((r) => r.id)
        .sort()
        .reverse();
    for (const text of ["customer", "rare", "er 1"]) {
      const pages = await allPages(api, "/entities", { name: text.toUpperCase(), limit: "100" }, "entities", "entity_id");
      expect(pages, text).toEqual(expected(text));
    }
    const first = await rpc.listEntities({ name: "rare", limit: 20 });
    const second = await rpc.listEntities({ name: "rare", limit: 20, cursor: first.page!.nextCursor });
    expect([...first.entities, ...second.entities].map((e) => e.entityId)).toEqual(expected("rare"));
    expect(second.page?.hasNext).toBe(false);
  });

  it("never matches another account's or another program's entities", async () => {
    const mine = await tenant();
    const theirs = await tenant();
    const own = await mine.entity({ entity_name: "Shared Name" });
    await theirs.entity({ entity_name: "Shared Name" });
    const program = await mine.api.post("/program", { program_name: "Other" });
    await mine.api.post(
      "/entity",
      { entity_name: "Shared Name", entity_type: "customer" },
      { program_id: program.body.program.program_id },
    );
    expect(idsOf(await mine.api.get("/entities", { name: "shared" }), "entities", "entity_id")).toEqual([own.entity_id]);
    expect((await mine.rpc.listEntities({ name: "shared" })).entities.map((e) => e.entityId)).toEqual([own.entity_id]);
  });
});

describe("GET /transactions filters", () => {
  it("selects an entity's legs by their group's metadata and by created_at", async () => {
    const { api, alice, group } = await tenant();
    const a = await group({ invoice: "inv-1" });
    await new Promise((resolve) => setTimeout(resolve, 5));
    const b = await group({ invoice: "inv-2" });
    await new Promise((resolve) => setTimeout(resolve, 5));
    const c = await group({ invoice: "inv-1" }, "pending");
    const list = async (query: Record<string, string>) =>
      idsOf(await api.get("/transactions", { entity_id: alice, ...query }), "transactions", "transaction_group_id");
    expect(await list({ "metadata[invoice]": "inv-1" })).toEqual([c.transaction_group_id, a.transaction_group_id]);
    expect(await list({ "metadata[invoice]": "inv-1", status: "posted" })).toEqual([a.transaction_group_id]);
    expect(await list({ created_after: b.created_at })).toEqual([c.transaction_group_id, b.transaction_group_id]);
    expect(await list({ created_after: a.created_at, created_before: c.created_at })).toEqual([
      b.transaction_group_id,
      a.transaction_group_id,
    ]);
  });
});

describe("over RPC", () => {
  it("ListTransactionGroups, ListEntities and ListTransactions answer what REST answers", async () => {
    const { api, rpc, alice, group, entity } = await tenant();
    const a = await group({ n: 5 });
    await new Promise((resolve) => setTimeout(resolve, 5));
    const b = await group({ n: "5", flag: true });
    await group({ n: 6 });
    const tagged = await entity({ metadata: { n: 5 } });
    const since = timestampFromDate(new Date(a.created_at));

    const groups = await rpc.listTransactionGroups({ metadata: { n: "5" }, createdAfter: since, limit: 1 });
    expect(groups.transactionGroups.map((g) => g.transactionGroupId)).toEqual([b.transaction_group_id]);
    expect(groups.transactionGroups[0]!.legs).toHaveLength(2);
    expect(groups.page?.hasNext).toBe(true);
    const next = await rpc.listTransactionGroups({ metadata: { n: "5" }, createdAfter: since, limit: 1, cursor: groups.page!.nextCursor });
    expect(next.transactionGroups.map((g) => g.transactionGroupId)).toEqual([a.transaction_group_id]);
    expect(next.page?.hasNext).toBe(false);
    const rest = groupIds(await api.get("/transaction/groups", { "metadata[n]": "5", created_after: a.created_at }));
    expect(rest).toEqual([b.transaction_group_id, a.transaction_group_id]);

    const flagged = await rpc.listTransactionGroups({ metadata: { n: "5", flag: "true" }, status: TransactionStatus.POSTED });
    expect(flagged.transactionGroups.map((g) => g.transactionGroupId)).toEqual([b.transaction_group_id]);
    const entities = await rpc.listEntities({ metadata: { n: "5" }, status: EntityStatus.ACTIVE });
    expect(entities.entities.map((e) => e.entityId)).toEqual([tagged.entity_id]);
    const legs = await rpc.listTransactions({
      entityId: alice,
      metadata: { n: "5" },
      createdBefore: timestampFromDate(new Date(b.created_at)),
    });
    expect(legs.legs.map((leg) => leg.transactionGroupId)).toEqual([a.transaction_group_id]);
  });
});
