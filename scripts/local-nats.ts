// For `pnpm start` on a laptop: when NATS_URL points at this machine and nothing answers there,
// start a local nats-server with JetStream (when one is installed) for the life of the process.
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { probe, reachable } from "./reachable.js";

/** How long a nats-server just started has to answer; it takes well under a second. */
const START_TIMEOUT_MS = 5_000;

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
  const answer = await probe(host, port);
  if (answer.reachable) return undefined;
  if (!["127.0.0.1", "localhost", "::1"].includes(host)) {
    console.error(
      `NATS at ${host}:${port} not reachable (${answer.reason}): the services start anyway and publish events once it answers.`,
    );
    return undefined;
  }
  const binary = findNatsServer();
  if (!binary) {
    throw new Error(
      `NATS at ${host}:${port} not reachable (${answer.reason}) and no nats-server is installed. Install one ` +
        `(Debian: apt-get install nats-server; or a release from the NATS project) or set NATS_URL to a running server with JetStream.`,
    );
  }
  const store = join(dataDir, "nats");
  mkdirSync(store, { recursive: true });
  console.error(
    `NATS at ${host}:${port} not reachable (${answer.reason}): starting a local nats-server with JetStream (${binary}, data in ${store}).`,
  );
  const child: ChildProcess = spawn(binary, ["-a", host, "-p", String(port), "-js", "-sd", store], { stdio: ["ignore", "ignore", "pipe"] });
  await waitForNats(child, host, port);
  return () => child.kill("SIGTERM");
}

/** Resolves once the started nats-server answers; rejects, saying why, when it exits or stays silent. */
async function waitForNats(child: ChildProcess, host: string, port: number): Promise<void> {
  let stderr = "";
  child.stderr?.on("data", (chunk: Buffer) => (stderr = (stderr + chunk.toString()).slice(-2_000)));
  let exited: string | undefined;
  child.once("exit", (code, signal) => (exited = `exited with ${signal ?? code}`));
  child.once("error", (err) => (exited = err.message));
  const deadline = Date.now() + START_TIMEOUT_MS;
  while (exited === undefined && Date.now() < deadline) {
    if (await reachable(host, port)) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  child.kill("SIGTERM");
  throw new Error(
    `the local nats-server ${exited ?? `did not answer on ${host}:${port} within ${START_TIMEOUT_MS / 1000} s`}` +
      `${stderr.trim() ? `: ${stderr.trim().split("\n").at(-1)}` : ""}; set NATS_URL to a running server with JetStream.`,
  );
}
