import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { Code, ConnectError, createClient, type Client } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { restClient, startStack, type Stack } from "@ledger/e2e";
import { HoldService } from "@ledger/proto/hold/v1/hold_pb.js";
import { LedgerService } from "@ledger/proto/ledger/v1/ledger_pb.js";
import { NotificationService } from "@ledger/proto/notification/v1/notification_pb.js";

// The key lifecycle of `pnpm ledger` (docs/operations.md#api-keys): create, list, revoke, run as a real
// process against the test database; a revoked key refused on every port within 5 seconds; and
// last_used_at written in batches, not per request.

const execFileAsync = promisify(execFile);
const CLI = fileURLToPath(new URL("./cli.ts", import.meta.url));
const TSX = fileURLToPath(new URL("../../../node_modules/.bin/tsx", import.meta.url));

/** Runs the CLI; resolves with its exit code and output, whatever the code. */
async function ledgerCli(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await execFileAsync(TSX, [CLI, ...args], { env: { ...process.env, DATABASE_URL: inject("databaseUrl") } });
    return { code: 0, stdout, stderr };
  } catch (err) {
    const failed = err as { code: number; stdout: string; stderr: string };
    return { code: failed.code, stdout: failed.stdout, stderr: failed.stderr };
  }
}

async function ledgerCliJson(...args: string[]) {
  const result = await ledgerCli(...args, "--json");
  expect(result, result.stderr).toMatchObject({ code: 0 });
  return JSON.parse(result.stdout);
}

const FLUSH_MS = 1_000;

let stack: Stack;
beforeAll(async () => {
  stack = await startStack({ notification: {}, ledger: { keyUsageFlushMs: FLUSH_MS } });
});
afterAll(async () => stack?.close());

function rpcClients(apiKey: string) {
  const headers = { authorization: apiKey };
  const transport = (url: string) => createConnectTransport({ baseUrl: url, httpVersion: "2", useBinaryFormat: true });
  const ledger: Client<typeof LedgerService> = createClient(LedgerService, transport(stack.ledgerUrl));
  const hold: Client<typeof HoldService> = createClient(HoldService, transport(stack.hold!.server.url));
  const notification: Client<typeof NotificationService> = createClient(NotificationService, transport(stack.notification!.server.url));
  return {
    ledger: () => ledger.listPrograms({}, { headers }),
    hold: () => hold.listHolds({}, { headers }),
    notification: () => notification.listEndpoints({}, { headers }),
  };
}

/**
 * Whether `apiKey` is refused as unauthenticated on each path: REST through the gateway to each
 * service, and each service's RPC port directly. Any other answer (even a 400 for the empty
 * request) means the key was accepted.
 */
async function refusals(apiKey: string): Promise<Record<string, boolean>> {
  const api = restClient(stack.restUrl, apiKey);
  const rpc = rpcClients(apiKey);
  const refusedRpc = (call: () => Promise<unknown>) =>
    call().then(
      () => false,
      (err: unknown) => ConnectError.from(err).code === Code.Unauthenticated,
    );
  const [restLedger, restHold, restNotification, rpcLedger, rpcHold, rpcNotification] = await Promise.all([
    api.get("/programs").then((r) => r.status === 401),
    api.get("/hold", { hold_id: "hold_00000000000000000000000000" }).then((r) => r.status === 401),
    api.get("/webhooks").then((r) => r.status === 401),
    refusedRpc(rpc.ledger),
    refusedRpc(rpc.hold),
    refusedRpc(rpc.notification),
  ]);
  return { restLedger, restHold, restNotification, rpcLedger, rpcHold, rpcNotification };
}

describe("pnpm ledger accounts and keys", () => {
  it("lists accounts, creates a second key, lists keys without ever showing one, and revokes", async () => {
    const accounts = await ledgerCliJson("accounts", "list", "--limit", "1000");
    expect(accounts.accounts).toContainEqual(
      expect.objectContaining({ account_id: stack.account.account_id, default_program_id: stack.account.program_id, active_keys: 1 }),
    );

    const created = await ledgerCliJson("keys", "create", "--account", stack.account.account_id);
    expect(Object.keys(created).sort()).toEqual(["api_key", "key_id"]);
    expect(created.key_id).toMatch(/^key_[0-9a-z]{26}$/);
    expect((await restClient(stack.restUrl, created.api_key).get("/programs")).status).toBe(200);

    const listed = await ledgerCli("keys", "list", "--account", stack.account.account_id, "--json");
    expect(listed.code).toBe(0);
    expect(listed.stdout).not.toContain(created.api_key);
    expect(listed.stdout).not.toContain(stack.account.api_key);
    const keys = JSON.parse(listed.stdout).keys;
    expect(keys).toHaveLength(2);
    const mine = keys.find((k: { key_id: string }) => k.key_id === created.key_id);
    expect(Object.keys(mine).sort()).toEqual(["created_at", "key_id", "last_used_at", "prefix", "revoked_at"]);
    expect(mine.prefix).toBe(created.api_key.slice(0, 12));
    expect(mine.revoked_at).toBeNull();

    const text = await ledgerCli("keys", "list", "--account", stack.account.account_id);
    expect(text.stdout).toContain(created.key_id);
    expect(text.stdout).toContain("LAST USED");
    expect(text.stdout).not.toContain(created.api_key);

    const revoked = await ledgerCli("keys", "revoke", created.key_id);
    expect(revoked).toMatchObject({ code: 0, stdout: expect.stringContaining(`revoked key ${created.key_id}`) });
    const again = await ledgerCli("keys", "revoke", created.key_id, "--json");
    expect(again.code).toBe(0);
    expect(JSON.parse(again.stdout)).toMatchObject({ key_id: created.key_id, revoked_at: expect.any(String) });
    const after = await ledgerCliJson("keys", "list", "--account", stack.account.account_id);
    expect(after.keys.find((k: { key_id: string }) => k.key_id === created.key_id).revoked_at).toEqual(expect.any(String));
    // The account's first key is untouched.
    expect((await stack.api.get("/programs")).status).toBe(200);
  });

  it("answers mistakes with a message and exit status 1 (nothing to act on) or 2 (bad usage)", async () => {
    const unknownAccount = "acct_00000000000000000000000000";
    const unknownKey = "key_00000000000000000000000000";
    const cases: [string[], number, string][] = [
      [["keys", "create", "--account", unknownAccount], 1, `no account ${unknownAccount}`],
      [["keys", "list", "--account", unknownAccount], 1, "no account"],
      [["keys", "revoke", unknownKey], 1, `no key ${unknownKey}`],
      [["keys", "create"], 2, "--account is required"],
      [["keys", "create", "--account", "nope"], 2, "not an account id"],
      [["keys", "revoke"], 2, "one KEY_ID"],
      [["keys", "frobnicate"], 2, "unknown command"],
      [["accounts", "list", "--limit", "0"], 2, "--limit"],
      [["keys", "list", "--bogus"], 2, "usage:"],
    ];
    const results = await Promise.all(cases.map(([args]) => ledgerCli(...args)));
    cases.forEach(([args, code, message], i) => {
      expect(results[i], args.join(" ")).toMatchObject({ code, stdout: "", stderr: expect.stringContaining(message) });
    });
    const help = await ledgerCli("--help");
    expect(help).toMatchObject({ code: 0, stdout: expect.stringContaining("keys revoke KEY_ID") });
  });
});

describe("revocation", () => {
  it("refuses a revoked key on REST and every RPC port, caches included, within 5 seconds", async () => {
    const { key_id: keyId, api_key: apiKey } = await ledgerCliJson("keys", "create", "--account", stack.account.account_id);
    // Every path has looked the key up and holds it in its cache as valid.
    expect(Object.values(await refusals(apiKey))).toEqual([false, false, false, false, false, false]);

    // The revocation has committed when the CLI exits: the bound is counted from there.
    const revoked = await ledgerCli("keys", "revoke", keyId);
    expect(revoked.code).toBe(0);
    const revokedAt = performance.now();
    const firstRefused: Record<string, number> = {};
    while (Object.keys(firstRefused).length < 6 && performance.now() - revokedAt < 10_000) {
      const now = await refusals(apiKey);
      const at = performance.now() - revokedAt;
      for (const [path, refused] of Object.entries(now)) if (refused) firstRefused[path] ??= at;
      // Once refused, a path must stay refused.
      for (const path of Object.keys(firstRefused)) expect(now[path], path).toBe(true);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(Object.keys(firstRefused).sort()).toEqual([
      "restHold",
      "restLedger",
      "restNotification",
      "rpcHold",
      "rpcLedger",
      "rpcNotification",
    ]);
    for (const [path, ms] of Object.entries(firstRefused)) expect(ms, `${path} refused after ${Math.round(ms)} ms`).toBeLessThan(5_000);
    // The account's other key still works everywhere.
    expect(Object.values(await refusals(stack.account.api_key)).some(Boolean)).toBe(false);
  });
});

describe("last_used_at", () => {
  const row = async (keyId: string) =>
    (
      await stack.sql<
        { version: string; last_used_at: Date | null }[]
      >`select xmin::text as version, last_used_at from api_keys where id = ${keyId}`
    )[0]!;

  it("advances after use, written at most once per flush interval however many requests", async () => {
    const { key_id: keyId, api_key: apiKey } = await ledgerCliJson("keys", "create", "--account", stack.account.account_id);
    expect((await row(keyId)).last_used_at).toBeNull();
    const api = restClient(stack.restUrl, apiKey);

    // Busy use for 3.5 flush intervals, while watching the row's version (xmin changes with every write).
    const started = new Date();
    const versions = new Set<string>([(await row(keyId)).version]);
    let requests = 0;
    let watching = true;
    const watcher = (async () => {
      while (watching) {
        versions.add((await row(keyId)).version);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    })();
    const until = performance.now() + 3.5 * FLUSH_MS;
    while (performance.now() < until) {
      expect((await api.get("/programs")).status).toBe(200);
      requests++;
    }
    await new Promise((resolve) => setTimeout(resolve, FLUSH_MS + 200));
    watching = false;
    await watcher;

    const writes = versions.size - 1;
    expect(requests).toBeGreaterThan(50);
    // 3.5 intervals of use and one to finish: at most 5 flushes can have written the row.
    expect(writes).toBeGreaterThanOrEqual(1);
    expect(writes).toBeLessThanOrEqual(5);
    const first = (await row(keyId)).last_used_at!;
    expect(first.getTime()).toBeGreaterThanOrEqual(started.getTime() - 1_000);

    // Used again, later: the time moves on.
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect((await api.get("/programs")).status).toBe(200);
    const advanced = await (async () => {
      const deadline = performance.now() + 3 * FLUSH_MS;
      while (performance.now() < deadline) {
        const at = (await row(keyId)).last_used_at!;
        if (at > first) return true;
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      return false;
    })();
    expect(advanced).toBe(true);
  });

  it("counts a key used only on another service's port", async () => {
    const { key_id: keyId, api_key: apiKey } = await ledgerCliJson("keys", "create", "--account", stack.account.account_id);
    await rpcClients(apiKey)
      .hold()
      .catch((err: unknown) => expect(ConnectError.from(err).code).not.toBe(Code.Unauthenticated));
    let usedAt: Date | null = null;
    const deadline = performance.now() + 3 * FLUSH_MS;
    while (!usedAt && performance.now() < deadline) {
      usedAt = (await row(keyId)).last_used_at;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(usedAt).toBeInstanceOf(Date);
  });
});
