import { mkdtempSync, rmSync } from "node:fs";
import { createServer, type Http2Server } from "node:http2";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fromBinary } from "@bufbuild/protobuf";
import {
  CreateTransactionRequestSchema,
  FundEntityRequestSchema,
  GetEntityRequestSchema,
  GetEntityStatementRequestSchema,
} from "@ledger/proto/ledger/v1/ledger_pb.js";
import { isoMicros } from "@ledger/common";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { callsPerProcess, parseH2loadOutput, runH2load } from "./h2load.js";

// h2load run against a stand-in for the ledger's RPC port that records every request and refuses
// every fifth: the h2load cells' numbers are only as good as the bodies they send and the answers
// they count. Needs Debian's nghttp2-client (scripts/ensure-bench-tools.sh installs it).

const ENTITIES = Array.from({ length: 40 }, (_, i) => `ent_${String(i).padStart(3, "0")}`);
const FIXTURES = { entities: ENTITIES, hot: "ent_hot" };

interface Seen {
  path: string;
  headers: Record<string, string | string[] | undefined>;
  body: Buffer;
  /** The HTTP/2 connection the call came on. */
  session: object;
}

let server: Http2Server;
let url: string;
let dir: string;
let seen: Seen[] = [];

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "h2load-test-"));
  server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      seen.push({ path: req.url, headers: req.headers, body: Buffer.concat(chunks), session: req.stream.session as object });
      res.writeHead(seen.length % 5 === 0 ? 400 : 200, { "content-type": "application/proto" });
      res.end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  await new Promise<void>((resolve) => server.close(() => resolve()));
  rmSync(dir, { recursive: true, force: true });
});

describe("h2load cells", () => {
  it("spreads the calls in flight over at most 16 processes, every call counted once", () => {
    expect(callsPerProcess(1)).toEqual([1]);
    expect(callsPerProcess(16)).toEqual(Array(16).fill(1));
    expect(callsPerProcess(64)).toEqual(Array(16).fill(4));
    const odd = callsPerProcess(37);
    expect(odd).toHaveLength(16);
    expect(odd.reduce((a, b) => a + b, 0)).toBe(37);
  });

  it("multiplexes each process's calls on one HTTP/2 connection, as an RPC client does", async () => {
    seen = [];
    await runH2load({ ledgerUrl: url, apiKey: "k", workload: "transfer", concurrency: 32, seconds: 1, fixtures: FIXTURES, dir });
    // 32 calls in flight from 16 processes, two each: every process's pair comes on one connection
    // (with a connection per call, each pair would come on two). On a busy machine a process may
    // not get a request out in a second, so not every pair has to be seen.
    const sessionsByPair = new Map<string, Set<object>>();
    for (const s of seen) {
      const req = fromBinary(CreateTransactionRequestSchema, s.body);
      if (req.form.case !== "transfer") throw new Error("not a transfer");
      const pair = `${req.form.value.fromEntityId}>${req.form.value.toEntityId}`;
      sessionsByPair.set(pair, (sessionsByPair.get(pair) ?? new Set<object>()).add(s.session));
    }
    expect(sessionsByPair.size).toBeGreaterThanOrEqual(8);
    expect(sessionsByPair.size).toBeLessThanOrEqual(16);
    for (const sessions of sessionsByPair.values()) expect(sessions.size).toBe(1);
  });

  it("posts each process's own transfer as a Connect binary call and counts refusals by status", async () => {
    seen = [];
    const result = await runH2load({
      ledgerUrl: url,
      apiKey: "lsk_key",
      workload: "transfer",
      concurrency: 4,
      seconds: 1,
      fixtures: FIXTURES,
      dir,
    });

    expect(seen.length).toBeGreaterThan(20);
    for (const s of seen) {
      expect(s.path).toBe("/ledger.v1.LedgerService/CreateTransaction");
      expect(s.headers["content-type"]).toBe("application/proto");
      expect(s.headers["connect-protocol-version"]).toBe("1");
      expect(s.headers["authorization"]).toBe("lsk_key");
    }
    // Four processes, four distinct pairs, none moving money from an entity to itself.
    const pairs = new Set(
      seen.map((s) => {
        const req = fromBinary(CreateTransactionRequestSchema, s.body);
        if (req.form.case !== "transfer") throw new Error("not a transfer");
        expect(req.form.value.fromEntityId).not.toBe(req.form.value.toEntityId);
        expect(req.form.value.amount).toBe(1n);
        return `${req.form.value.fromEntityId}>${req.form.value.toEntityId}`;
      }),
    );
    expect(pairs.size).toBe(4);
    // Every fifth request was refused: counted as an error, not as throughput.
    const refused = result.errors["http_400"] ?? 0;
    expect(refused).toBeGreaterThan(0);
    expect(result.ok + refused).toBeLessThanOrEqual(seen.length);
    expect(result.ok).toBeGreaterThanOrEqual(Math.floor(seen.length * 0.8) - 8);
    expect(result.perSecond).toBeGreaterThan(0);
    expect(result.p50).toBeGreaterThan(0);
    expect(result.p99).toBeGreaterThanOrEqual(result.p50);
  });

  it("funds one entity per process in the deposit workload, and debits the hot entity from every other process", async () => {
    seen = [];
    await runH2load({ ledgerUrl: url, apiKey: "k", workload: "deposit", concurrency: 3, seconds: 1, fixtures: FIXTURES, dir });
    // Each process its own entity (on a busy machine a process may not get a request out in a second).
    const funded = new Set(seen.map((s) => fromBinary(FundEntityRequestSchema, s.body).entityId));
    expect(funded.size).toBeGreaterThanOrEqual(2);
    for (const id of funded) expect(ENTITIES.slice(0, 3)).toContain(id);
    expect(new Set(seen.map((s) => s.path))).toEqual(new Set(["/ledger.v1.LedgerService/FundEntity"]));

    seen = [];
    await runH2load({ ledgerUrl: url, apiKey: "k", workload: "hot", concurrency: 4, seconds: 1, fixtures: FIXTURES, dir });
    const debited = new Set(
      seen.map((s) => {
        const req = fromBinary(CreateTransactionRequestSchema, s.body);
        return req.form.case === "transfer" ? req.form.value.fromEntityId : "";
      }),
    );
    // Processes 0 and 2 debit the hot entity, 1 and 3 entities of their own (2 and 6).
    expect(debited.has("ent_hot")).toBe(true);
    for (const id of debited) expect(["ent_hot", "ent_002", "ent_006"]).toContain(id);
  });

  it("reads the history entity's statement as a row of one-second runs, each a full page's window of its own", async () => {
    // 5,000 legs, ten to a moment, one second apart, to the microsecond as the seeding reads them back.
    const moments = Array.from({ length: 5000 }, (_, i) =>
      new Date(Date.UTC(2026, 0, 1) + Math.floor(i / 10) * 1000).toISOString().replace("Z", "000Z"),
    );
    const history = { entityId: "ent_history", moments };
    seen = [];
    const result = await runH2load({
      ledgerUrl: url,
      apiKey: "k",
      workload: "statement",
      concurrency: 1,
      seconds: 3,
      fixtures: FIXTURES,
      history,
      dir,
    });
    expect(new Set(seen.map((s) => s.path))).toEqual(new Set(["/ledger.v1.LedgerService/GetEntityStatement"]));
    const windows = new Set(
      seen.map((s) => {
        const req = fromBinary(GetEntityStatementRequestSchema, s.body);
        expect(req).toMatchObject({ entityId: "ent_history", limit: 1000 });
        // Twice a page of legs between from and to: the page is always full.
        const from = moments.indexOf(isoMicros(req.from!));
        const to = moments.indexOf(isoMicros(req.to!));
        expect(from).toBeGreaterThanOrEqual(0);
        expect(to - from).toBeGreaterThanOrEqual(1990);
        return `${req.from!.seconds}-${req.to!.seconds}`;
      }),
    );
    // One window a second, one h2load process at a time: three windows (two, should two draws coincide).
    expect(windows.size).toBeGreaterThanOrEqual(2);
    expect(windows.size).toBeLessThanOrEqual(3);
    expect(result.ok).toBeGreaterThan(0);
    expect(result.perSecond).toBeLessThan(seen.length);

    seen = [];
    await runH2load({ ledgerUrl: url, apiKey: "k", workload: "as-of", concurrency: 1, seconds: 1, fixtures: FIXTURES, history, dir });
    expect(new Set(seen.map((s) => s.path))).toEqual(new Set(["/ledger.v1.LedgerService/GetEntity"]));
    expect(new Set(seen.map((s) => fromBinary(GetEntityRequestSchema, s.body).entityId))).toEqual(new Set(["ent_history"]));
    await expect(
      runH2load({ ledgerUrl: url, apiKey: "k", workload: "statement", concurrency: 4, seconds: 1, fixtures: FIXTURES, history, dir }),
    ).rejects.toThrow(/concurrency 1 only/);
  });

  it("refuses a workload it cannot send", async () => {
    await expect(
      runH2load({ ledgerUrl: url, apiKey: "k", workload: "multileg", concurrency: 1, seconds: 1, fixtures: FIXTURES, dir }),
    ).rejects.toThrow(/does not run the multileg workload/);
  });

  it("reads h2load's summary and the CPU bash's times reported", () => {
    const out = [
      "finished in 1.01s, 1391.00 req/s, 44.98KB/s",
      "requests: 1391 total, 1393 started, 1391 done, 1113 succeeded, 278 failed, 0 errored, 2 timeout",
      "status codes: 1113 2xx, 0 3xx, 278 4xx, 0 5xx",
      "0m0.003s 0m0.000s",
      "0m0.022s 1m0.065s",
    ].join("\n");
    const { cpuSeconds, ...counts } = parseH2loadOutput(out);
    expect(counts).toEqual({ succeeded: 1113, failed: 278, errored: 0, timeout: 2, seconds: 1.01 });
    expect(cpuSeconds).toBeCloseTo(60.087, 6);
    expect(() => parseH2loadOutput("garbage")).toThrow(/cannot read h2load's output/);
  });
});
