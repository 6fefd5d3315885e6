import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort, NATS_SERVER_BIN } from "@ledger/testing";
import { afterAll, expect, it, vi } from "vitest";
import { decideDatabase } from "./embedded-postgres.js";
import { ensureLocalNats } from "./local-nats.js";
import { probe } from "./reachable.js";

// `npm start` where a server is installed but does not answer: it decides to bring its own within a
// second or two, not after a connect timeout, and says in one line what it found and what it does.

const dataRoot = mkdtempSync(join(tmpdir(), "reachable-"));
afterAll(() => rmSync(dataRoot, { recursive: true, force: true }));

/** Milliseconds `work` took, with its result. */
async function timed<T>(work: () => Promise<T>): Promise<{ ms: number; result: T }> {
  const started = performance.now();
  const result = await work();
  return { ms: performance.now() - started, result };
}

it("says a port nothing listens on is refused, at once", async () => {
  const port = await freePort();
  const { ms, result } = await timed(() => probe("127.0.0.1", port));
  expect(result).toEqual({ reachable: false, reason: "ECONNREFUSED" });
  expect(ms).toBeLessThan(1_000);
});

it("gives up on an address that never answers after its timeout, not the kernel's", async () => {
  // A documentation-only address (TEST-NET-1): its packets go nowhere, or fail at once where no route exists.
  const { ms, result } = await timed(() => probe("192.0.2.1", 5432, 500));
  expect(result.reachable).toBe(false);
  expect(ms).toBeLessThan(2_000);
});

it("finds a server that listens", async () => {
  const server = createServer((socket) => socket.destroy());
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  try {
    expect(await probe("127.0.0.1", port)).toEqual({ reachable: true });
  } finally {
    server.close();
  }
});

it("falls back to the embedded database within seconds when the default PostgreSQL does not answer, and says why", async () => {
  const port = await freePort();
  const { ms, result } = await timed(() => decideDatabase({}, dataRoot, `postgres://127.0.0.1:${port}/ledger`));
  expect(result).toEqual({ embedded: true, why: `PostgreSQL at 127.0.0.1:${port} not reachable (ECONNREFUSED)` });
  expect(ms).toBeLessThan(2_000);
  // A server that answers is used; LEDGER_EMBEDDED_POSTGRES=false stops instead of falling back.
  const server = createServer((socket) => socket.destroy());
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const listening = (server.address() as { port: number }).port;
  try {
    const url = `postgres://127.0.0.1:${listening}/ledger`;
    expect(await decideDatabase({}, dataRoot, url)).toEqual({ embedded: false, url });
  } finally {
    server.close();
  }
  await expect(decideDatabase({ LEDGER_EMBEDDED_POSTGRES: "false" }, dataRoot, `postgres://127.0.0.1:${port}/ledger`)).rejects.toThrow(
    `no PostgreSQL answers at 127.0.0.1:${port} (ECONNREFUSED)`,
  );
});

it.skipIf(!NATS_SERVER_BIN)("starts a local nats-server within seconds when NATS does not answer, and says so in one line", async () => {
  const port = await freePort();
  const said = vi.spyOn(console, "error").mockImplementation(() => {});
  try {
    const { ms, result: stop } = await timed(() => ensureLocalNats(`nats://127.0.0.1:${port}`, dataRoot));
    try {
      expect(ms).toBeLessThan(6_000);
      expect(said.mock.calls.map((call) => String(call[0]))).toEqual([
        expect.stringMatching(
          new RegExp(`^NATS at 127\\.0\\.0\\.1:${port} not reachable \\(ECONNREFUSED\\): starting a local nats-server`),
        ),
      ]);
      expect(await probe("127.0.0.1", port)).toEqual({ reachable: true });
    } finally {
      stop?.();
    }
    expect(stop).toBeTypeOf("function");
  } finally {
    said.mockRestore();
  }
});
