import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
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

/**
 * The lowest port the kernel hands out to outgoing connections (Linux's ip_local_port_range;
 * 32768, its default, elsewhere).
 */
function ephemeralPortsFrom(): number {
  try {
    const low = Number(readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/)[0]);
    if (Number.isInteger(low) && low > 1024) return low;
  } catch {
    // Not Linux: assume its default.
  }
  return 32_768;
}

/** Whether 127.0.0.1:`port` can be listened on now. */
function canListen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once("error", () => resolve(false));
    server.listen(port, "127.0.0.1", () => server.close(() => resolve(true)));
  });
}

const handedOut = new Set<number>();

/**
 * A TCP port that was free a moment ago, for a child process to listen on. It is taken below the
 * kernel's ephemeral range: a port from that range (what listening on port 0 gives) may become
 * the local end of any outgoing connection before the child listens on it, and once did, a
 * service's database pool taking the port the gateway was about to listen on.
 */
export async function freePort(): Promise<number> {
  const high = ephemeralPortsFrom();
  const low = Math.min(20_000, high - 1_000);
  for (let tries = 0; tries < 100; tries++) {
    const port = low + Math.floor(Math.random() * (high - low));
    // Two callers in this process must not get the same port before either listens on it.
    if (handedOut.has(port) || !(await canListen(port))) continue;
    handedOut.add(port);
    return port;
  }
  throw new Error(`no free port between ${low} and ${high} after 100 tries`);
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

/** Three (or `size`) JetStream nats-servers clustered on loopback, each of which a test can stop and start. */
export interface OwnNatsCluster {
  nodes: Array<OwnNats & { name: string }>;
  /** The client URLs of every node, comma-separated, as NATS_URL takes them. */
  url: string;
  dispose(): Promise<void>;
}

/**
 * Prepares and starts a NATS cluster of `size` nodes on free loopback ports, each with its own
 * store, routes to the others and a server name (JetStream needs one per node in a cluster).
 */
export async function ownNatsCluster(size = 3): Promise<OwnNatsCluster> {
  const routePorts = await Promise.all(Array.from({ length: size }, () => freePort()));
  const routes = routePorts.map((p) => `nats://127.0.0.1:${p}`).join(",");
  const clusterName = `ledger-test-${process.pid}`;
  const nodes = await Promise.all(
    routePorts.map(async (routePort, i) => {
      const name = `n${i + 1}`;
      const node = await ownNats([
        "--server_name",
        name,
        "--cluster_name",
        clusterName,
        "--cluster",
        `nats://127.0.0.1:${routePort}`,
        "--routes",
        routes,
      ]);
      return Object.assign(node, { name });
    }),
  );
  await Promise.all(nodes.map((n) => n.start()));
  return {
    nodes,
    url: nodes.map((n) => n.url).join(","),
    async dispose() {
      await Promise.all(nodes.map((n) => n.dispose()));
    },
  };
}
