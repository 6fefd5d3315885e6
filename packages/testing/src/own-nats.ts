import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { connect as connectTcp, createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** The nats-server binary, when this machine has one; tests that stop NATS skip without it. */
export const NATS_SERVER_BIN =
  process.env["NATS_SERVER_BIN"] ?? ["/usr/sbin/nats-server", "/usr/bin/nats-server", "/usr/local/bin/nats-server"].find(existsSync);

/** A nats-server of a test's own, on a free port, that the test can stop and start. */
export interface OwnNats {
  url: string;
  start(): Promise<void>;
  stop(): Promise<void>;
  /** Stops it and removes its store. */
  dispose(): Promise<void>;
}

/** A TCP port that was free a moment ago, for a child process to listen on. */
export async function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const server = createServer();
    server.listen(0, "127.0.0.1", () => {
      const port = (server.address() as { port: number }).port;
      server.close(() => resolve(port));
    });
  });
}

/** Prepares (does not start) a JetStream-enabled nats-server with a store of its own; `extraArgs` go to nats-server (auth, TLS). */
export async function ownNats(extraArgs: string[] = []): Promise<OwnNats> {
  if (!NATS_SERVER_BIN) throw new Error("no nats-server binary; set NATS_SERVER_BIN");
  const port = await freePort();
  const storeDir = mkdtempSync(join(tmpdir(), "ledger-nats-"));
  let child: ChildProcess | undefined;
  const stop = async () => {
    const running = child;
    if (!running || running.exitCode !== null || running.signalCode !== null) return;
    await new Promise<void>((resolve) => {
      running.once("exit", () => resolve());
      running.kill("SIGKILL");
    });
  };
  return {
    url: `nats://127.0.0.1:${port}`,
    async start() {
      child = spawn(NATS_SERVER_BIN!, ["-a", "127.0.0.1", "-p", String(port), "-js", "-sd", storeDir, ...extraArgs], { stdio: "ignore" });
      const deadline = Date.now() + 10_000;
      while (Date.now() < deadline) {
        const up = await new Promise<boolean>((resolve) => {
          const socket = connectTcp(port, "127.0.0.1");
          socket.once("connect", () => {
            socket.destroy();
            resolve(true);
          });
          socket.once("error", () => resolve(false));
        });
        if (up) return;
        await new Promise((r) => setTimeout(r, 100));
      }
      throw new Error("nats-server did not start");
    },
    stop,
    async dispose() {
      await stop();
      rmSync(storeDir, { recursive: true, force: true });
    },
  };
}
