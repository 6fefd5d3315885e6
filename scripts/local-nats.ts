// For `pnpm start` on a laptop: when NATS_URL points at this machine and nothing answers there,
// start a local nats-server with JetStream (when one is installed) for the life of the process.
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { reachable } from "./reachable.js";

function findNatsServer(): string | undefined {
  const candidates = [process.env["NATS_SERVER_BIN"], "/usr/sbin/nats-server", "/usr/bin/nats-server", "/usr/local/bin/nats-server"];
  for (const dir of (process.env["PATH"] ?? "").split(":")) if (dir) candidates.push(join(dir, "nats-server"));
  return candidates.find((c): c is string => !!c && existsSync(c));
}

/** Makes sure NATS answers at `natsUrl`; returns a stop function when it started one. */
export async function ensureLocalNats(natsUrl: string, dataDir: string): Promise<(() => void) | undefined> {
  const url = new URL(natsUrl);
  const host = url.hostname;
  const port = Number(url.port || 4222);
  if (await reachable(host, port)) return undefined;
  if (!["127.0.0.1", "localhost", "::1"].includes(host)) {
    console.error(`NATS does not answer at ${natsUrl}; the services start anyway and publish events once it does.`);
    return undefined;
  }
  const binary = findNatsServer();
  if (!binary) {
    throw new Error(
      `NATS does not answer at ${natsUrl} and no nats-server is installed. Install one ` +
        `(Debian: apt-get install nats-server; or a release from the NATS project) or set NATS_URL to a running server with JetStream.`,
    );
  }
  const store = join(dataDir, "nats");
  mkdirSync(store, { recursive: true });
  const child: ChildProcess = spawn(binary, ["-a", host, "-p", String(port), "-js", "-sd", store], { stdio: "ignore" });
  for (let i = 0; i < 50 && !(await reachable(host, port)); i++) await new Promise((r) => setTimeout(r, 100));
  console.error(`Started a local nats-server with JetStream on ${host}:${port} (data in ${store}).`);
  return () => child.kill("SIGTERM");
}
