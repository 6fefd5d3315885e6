import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseWrkOutput, runWrk, type WrkOptions } from "./wrk.js";

// rest-load.lua run by wrk against a stand-in for the gateway that records every request: the REST
// cells' numbers are only as good as the bodies it sends and the answers it counts. Needs Debian's
// wrk (scripts/ensure-bench-tools.sh installs it).

const ENTITIES = Array.from({ length: 50 }, (_, i) => `ent_${String(i).padStart(3, "0")}`);
const HOT = "ent_hot";
const KEY = "lsk_test_key";

type Body = Record<string, unknown> & { account?: { from: string; to: string } };
interface Seen {
  path: string;
  authorization: string | undefined;
  body: Body;
}

let server: Server;
let restUrl: string;
let dir: string;
let entitiesFile: string;
let seen: Seen[] = [];
/** What the stand-in answers a batch: every item done, or the first refused. */
let batchRefuses = false;
/** When set, every transfer is refused with this code. */
let transferRefusal: string | undefined;
const holds = new Map<string, string>();
/** The search's values from this one on find nothing. */
let emptyFrom = Number.POSITIVE_INFINITY;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "wrk-test-"));
  entitiesFile = join(dir, "entities.txt");
  writeFileSync(entitiesFile, `${ENTITIES.join("\n")}\n`);
  server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const text = Buffer.concat(chunks).toString("utf8");
      const body = (text === "" ? {} : JSON.parse(text)) as Body;
      seen.push({ path: req.url ?? "", authorization: req.headers.authorization, body });
      const url = new URL(req.url ?? "/", "http://stand-in");
      const answer = (status: number, value: unknown) => {
        res.writeHead(status, { "content-type": "application/json" });
        res.end(JSON.stringify(value));
      };
      switch (url.pathname) {
        case "/v1/transaction":
        case "/v1/entity/fund":
          if (transferRefusal) return answer(409, { status: "error", error: { code: transferRefusal, message: "no" } });
          return answer(201, { status: "success", transaction_group_id: "trx-grp_1" });
        case "/v1/hold": {
          const id = `hold_${holds.size}`;
          holds.set(id, String(body["entity_id"]));
          return answer(201, { status: "success", hold: { hold_id: id, entity_id: body["entity_id"], amount: 2, status: "held" } });
        }
        case "/v1/hold/capture":
          return answer(200, {
            status: "success",
            hold: { hold_id: body["hold_id"], entity_id: holds.get(String(body["hold_id"])), status: "captured" },
            transaction: { amount: 2, transaction_group_id: "trx-grp_2" },
          });
        case "/v1/transaction/batch": {
          const n = (body["transactions"] as unknown[]).length;
          return batchRefuses
            ? answer(200, {
                status: "success",
                succeeded: n - 1,
                failed: 1,
                results: [{ status: "error", error: { code: "insufficient_funds", message: "no" } }],
              })
            : answer(200, { status: "success", succeeded: n, failed: 0, results: [] });
        }
        case "/v1/transaction/groups": {
          // Values v0 to v<emptyFrom - 1> find a group; the others an empty page.
          const value = Number(url.searchParams.get("metadata[k]")?.slice(1));
          const groups = value < emptyFrom ? [{ transaction_group_id: `trx-grp_${value}`, legs: [] }] : [];
          return answer(200, { status: "success", transaction_groups: groups, pagination: { has_next: false } });
        }
        default:
          return answer(404, { status: "error", error: { code: "not_found", message: req.url } });
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  restUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
});

afterAll(async () => {
  await new Promise((resolve) => server.close(resolve));
  rmSync(dir, { recursive: true, force: true });
});

async function run(workload: string, concurrency = 4, searchValues?: number) {
  seen = [];
  holds.clear();
  const options: WrkOptions = {
    restUrl,
    apiKey: KEY,
    workload,
    concurrency,
    seconds: 1,
    entitiesFile,
    hot: HOT,
    ...(searchValues ? { searchValues } : {}),
  };
  const result = await runWrk(options);
  return { result, seen };
}

describe("rest-load.lua under wrk", () => {
  it("sends transfers between random distinct entities with the key, and counts every success", async () => {
    const { result, seen } = await run("transfer");
    expect(seen.length).toBeGreaterThan(50);
    for (const s of seen) {
      expect(s.path).toBe("/v1/transaction");
      expect(s.authorization).toBe(KEY);
      expect(s.body).toMatchObject({ status: "posted", amount: 1 });
      const { from, to } = s.body.account!;
      expect(ENTITIES).toContain(from);
      expect(ENTITIES).toContain(to);
      expect(from).not.toBe(to);
    }
    // Random pairs, not one pair over and over: most of the 2,450 ordered pairs are possible.
    expect(new Set(seen.map((s) => `${s.body.account!.from}>${s.body.account!.to}`)).size).toBeGreaterThan(Math.min(40, seen.length / 2));
    expect(result.ok).toBeGreaterThan(0);
    expect(result.ok).toBeLessThanOrEqual(seen.length);
    expect(result.units).toBe(result.ok);
    expect(result.errors).toEqual({});
    expect(result.p99).toBeGreaterThan(0);
  });

  it("debits the hot entity in every other transfer of the hot workload", async () => {
    const { seen } = await run("hot", 1);
    const fromHot = seen.filter((s) => s.body.account!.from === HOT).length;
    expect(Math.abs(fromHot - seen.length / 2)).toBeLessThanOrEqual(1);
  });

  it("deposits into random entities, and sends multi-leg transactions of ten distinct entities", async () => {
    const deposits = await run("deposit");
    expect(deposits.seen.every((s) => s.path === "/v1/entity/fund" && ENTITIES.includes(String(s.body["entity_id"])))).toBe(true);
    expect(new Set(deposits.seen.map((s) => s.body["entity_id"])).size).toBeGreaterThan(10);
    const multileg = await run("multileg");
    for (const s of multileg.seen) {
      const entries = s.body["entries"] as Array<{ entity_id: string; direction: string; amount: number }>;
      expect(new Set(entries.map((e) => e.entity_id)).size).toBe(10);
      expect(entries.filter((e) => e.direction === "debit")).toHaveLength(5);
      expect(entries.every((e) => e.amount === 2)).toBe(true);
    }
  });

  it("captures each hold it created, in full, to another entity, and counts a pair per capture", async () => {
    const { result, seen } = await run("hold");
    const captures = seen.filter((s) => s.path === "/v1/hold/capture");
    expect(captures.length).toBeGreaterThan(10);
    for (const c of captures) {
      const holdEntity = holds.get(String(c.body["hold_id"]));
      expect(holdEntity, "a capture names a hold the stand-in created").toBeDefined();
      expect(c.body["amount"]).toBe(2);
      expect(c.body["destination_entity_id"]).not.toBe(holdEntity);
    }
    expect(new Set(captures.map((c) => c.body["hold_id"])).size).toBe(captures.length);
    expect(result.units).toBeGreaterThan(0);
    expect(result.units).toBeLessThanOrEqual(captures.length);
    expect(result.ok).toBeGreaterThan(result.units);
  });

  it("sends batches of 100 transfers, counts them as 100 units, and a refused item as a failed call", async () => {
    const ok = await run("batch-hot", 2);
    for (const s of ok.seen) {
      const items = s.body["transactions"] as Body[];
      expect(items).toHaveLength(100);
      expect(items.every((i) => i.account!.from === HOT && i.account!.to !== HOT)).toBe(true);
    }
    expect(ok.result.units).toBe(ok.result.ok * 100);
    batchRefuses = true;
    try {
      const refused = await run("batch", 2);
      expect(refused.result.ok).toBe(0);
      expect(refused.result.errors["item_insufficient_funds"]).toBeGreaterThan(0);
    } finally {
      batchRefuses = false;
    }
  });

  it("searches groups by a random one of the seeded values of metadata k, and counts an empty page as an error", async () => {
    const { result, seen } = await run("search", 1, 20);
    expect(seen.length).toBeGreaterThan(20);
    for (const s of seen) expect(s.path).toMatch(/^\/v1\/transaction\/groups\?metadata%5Bk%5D=v(1?\d)$/);
    expect(new Set(seen.map((s) => s.path)).size).toBeGreaterThan(10);
    expect(result.units).toBe(result.ok);
    expect(result.errors).toEqual({});
    emptyFrom = 10;
    try {
      const half = await run("search", 1, 20);
      expect(half.result.errors["empty_page"]).toBeGreaterThan(0);
      expect(half.result.ok).toBeGreaterThan(0);
    } finally {
      emptyFrom = Number.POSITIVE_INFINITY;
    }
  });

  it("counts a refusal under the code of its answer", async () => {
    transferRefusal = "insufficient_funds";
    try {
      const { result } = await run("transfer");
      expect(result.ok).toBe(0);
      expect(Object.keys(result.errors)).toEqual(["insufficient_funds"]);
    } finally {
      transferRefusal = undefined;
    }
  });
});

describe("parseWrkOutput", () => {
  it("reads the script's line among wrk's own output, in ms", () => {
    const out = `Running 1s test @ http://x/v1\n  1 threads and 4 connections\nBENCH_WRK {"ok":10,"units":1000,"requests":11,"durationUs":1000000,"p50Us":1500,"p95Us":2000,"p99Us":2500,"maxUs":3000,"cpuSeconds":0.120,"errors":{"http_503":1}}\nRequests/sec: 11\n`;
    expect(parseWrkOutput(out)).toEqual({
      ok: 10,
      units: 1000,
      requests: 11,
      seconds: 1,
      p50: 1.5,
      p95: 2,
      p99: 2.5,
      max: 3,
      cpuSeconds: 0.12,
      errors: { http_503: 1 },
    });
    expect(() => parseWrkOutput("Running 1s test\n")).toThrow(/BENCH_WRK/);
  });
});
