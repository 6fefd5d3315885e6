import { execFile, spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { builtinModules } from "node:module";
import { connect as connectTcp } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { restClient } from "@ledger/e2e";
// Ports below the kernel's ephemeral range: one from port 0 may be taken by an outgoing connection before start-all listens on it.
import { freePort, startOtlpReceiver } from "@ledger/testing";
import { afterAll, beforeAll, expect, inject, it } from "vitest";
import { loadOpenApi } from "../gateway/src/openapi-source.js";
import { buildAll } from "./build.mjs";

// `npm start` on a machine without PostgreSQL: the whole system on the embedded database, as a
// child process running the compiled start script exactly as `npm start` does, through REST; then
// a stop with SIGTERM and a start on the same folder. NATS is the run's real server, on a stream of
// this test's own.

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const START_ALL = join(ROOT, "dist/start-all.js");
const CLI = join(ROOT, "dist/ledger-cli.js");
const run = promisify(execFile);

const dataRoot = mkdtempSync(join(tmpdir(), "start-all-"));
const tag = randomBytes(4).toString("hex");
const children: ChildProcess[] = [];

// What `npm start` runs after its build step; compiled here so the test runs today's code.
beforeAll(async () => {
  await buildAll();
}, 120_000);

/** The environment of a laptop: no DATABASE_URL, whatever the test run has. */
async function laptopEnv(extra: Record<string, string>): Promise<NodeJS.ProcessEnv> {
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const name of [
    "DATABASE_URL",
    "LEDGER_DATABASE_URL",
    "HOLD_DATABASE_URL",
    "NOTIFICATION_DATABASE_URL",
    "LEDGER_URL",
    "HOLD_URL",
    "NOTIFICATION_URL",
  ])
    delete env[name];
  return {
    ...env,
    LEDGER_DATA_DIR: dataRoot,
    NATS_URL: inject("natsUrl"),
    NATS_STREAM: `${inject("natsStreamPrefix")}${tag}`,
    NATS_SUBJECT_PREFIX: `test${tag}`,
    GATEWAY_HOST: "127.0.0.1",
    PORT: String(await freePort()),
    GATEWAY_OPS_PORT: String(await freePort()),
    LEDGER_PORT: String(await freePort()),
    HOLD_PORT: String(await freePort()),
    NOTIFICATION_PORT: String(await freePort()),
    LOG_LEVEL: "warn",
    ...extra,
  };
}

interface Running {
  child: ChildProcess;
  restUrl: string;
  databaseUrl: string;
  output: () => string;
}

/** Starts `scripts/start-all.ts` and waits for its "Ledger is up" line. */
async function startAll(env: NodeJS.ProcessEnv): Promise<Running> {
  const child = spawn(process.execPath, [START_ALL], { cwd: ROOT, env, stdio: ["ignore", "pipe", "pipe"] });
  children.push(child);
  let output = "";
  child.stdout!.on("data", (d: Buffer) => (output += d.toString()));
  child.stderr!.on("data", (d: Buffer) => (output += d.toString()));
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no "Ledger is up" within 90 s:\n${output}`)), 90_000);
    const check = () => {
      if (output.includes("Ledger is up")) {
        clearTimeout(timer);
        resolve();
      }
    };
    child.stderr!.on("data", check);
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`start-all exited with ${code}:\n${output}`));
    });
  });
  const databaseUrl = /served at (postgres:\/\/\S+) /.exec(output)?.[1];
  expect(output).toMatch(/LEDGER_EMBEDDED_POSTGRES=true: starting the embedded one \(PGlite, data in \S+pglite\)/);
  expect(output).toMatch(/Database: embedded PostgreSQL \(PGlite\), served at .*set DATABASE_URL/);
  return { child, restUrl: `http://127.0.0.1:${env["PORT"]}/v1`, databaseUrl: databaseUrl!, output: () => output };
}

/** Opens a connection to `port` that sends nothing; resolves with the ms until the server closed it (Infinity past 5 s). */
function closedAfterSilence(port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const socket = connectTcp(port, "127.0.0.1");
    const started = performance.now();
    const never = setTimeout(() => {
      resolve(Number.POSITIVE_INFINITY);
      socket.destroy();
    }, 5_000);
    socket.on("data", () => {});
    socket.once("error", reject);
    socket.once("close", () => {
      clearTimeout(never);
      resolve(performance.now() - started);
    });
  });
}

async function stop(running: Running): Promise<number | null> {
  const exited = new Promise<number | null>((resolve) => running.child.once("exit", (code) => resolve(code)));
  running.child.kill("SIGTERM");
  return exited;
}

afterAll(async () => {
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
  const nc = await connect({ servers: inject("natsUrl") });
  for (const stream of [`${inject("natsStreamPrefix")}${tag}`, `${inject("natsStreamPrefix")}${tag}_traced`])
    await (await jetstreamManager(nc)).streams.delete(stream).catch(() => {});
  await nc.close();
  rmSync(dataRoot, { recursive: true, force: true });
});

it("runs everything on the embedded database, and keeps the data across a restart", async () => {
  const env = await laptopEnv({ LEDGER_EMBEDDED_POSTGRES: "true" });
  const first = await startAll(env);
  expectNoTypeScriptLoader(first.child.pid!);

  // The CLI, in another process, reaches the embedded database through the URL the start printed.
  const { stdout } = await run(process.execPath, [CLI, "accounts", "create", "--name", "Laptop", "--json"], {
    cwd: ROOT,
    env: { ...env, DATABASE_URL: first.databaseUrl },
  });
  const account = JSON.parse(stdout) as { api_key: string };
  const api = restClient(first.restUrl, account.api_key);

  const alice = (await api.post("/entity", { entity_name: "Alice", entity_type: "customer" })).body.entity.entity_id as string;
  const bob = (await api.post("/entity", { entity_name: "Bob", entity_type: "customer" })).body.entity.entity_id as string;
  expect((await api.post("/entity/fund", { entity_id: alice, amount: 10_000 })).status).toBe(200);

  // Concurrent writes from several gateway connections: transfers both ways, deposits, a hold.
  const answers = await Promise.all([
    ...Array.from({ length: 16 }, () =>
      api.post("/transaction", { description: "a to b", status: "posted", amount: 300, account: { from: alice, to: bob } }),
    ),
    ...Array.from({ length: 8 }, () =>
      api.post("/transaction", { description: "b to a", status: "posted", amount: 100, account: { from: bob, to: alice } }),
    ),
    ...Array.from({ length: 8 }, () => api.post("/entity/fund", { entity_id: bob, amount: 50 })),
    api.post("/hold", { entity_id: alice, amount: 700 }),
  ]);
  for (const answer of answers) expect(answer.status, JSON.stringify(answer.body)).toBe(200);

  const balances = async (client: typeof api, id: string) => (await client.get("/entity", { entity_id: id })).body.entity.balances;
  const expectedAlice = {
    posted: 10_000 - 16 * 300 + 8 * 100,
    pending_debits: 0,
    pending_credits: 0,
    held: 700,
    available: 10_000 - 16 * 300 + 8 * 100 - 700,
  };
  const expectedBob = {
    posted: 16 * 300 - 8 * 100 + 8 * 50,
    pending_debits: 0,
    pending_credits: 0,
    held: 0,
    available: 16 * 300 - 8 * 100 + 8 * 50,
  };
  expect(await balances(api, alice)).toEqual(expectedAlice);
  expect(await balances(api, bob)).toEqual(expectedBob);
  // Posted balances of the program sum to zero: the external entity holds minus the deposits.
  const external = (await api.get("/program")).body.program.external_entity_id as string;
  expect((await balances(api, external)).posted).toBe(-(10_000 + 8 * 50));

  // The compiled gateway serves the OpenAPI document the build parsed from openapi.yaml.
  const served = await fetch(new URL("/v1/openapi.json", first.restUrl));
  expect(await served.json()).toEqual(loadOpenApi());

  expect(await stop(first)).toBe(0);
  expect(first.output()).not.toMatch(/shutdown failed/);

  // HTTP_HEADER_TIMEOUT_MS reaches every port of the one process: a connection that sends nothing is closed.
  const secondEnv = await laptopEnv({ LEDGER_EMBEDDED_POSTGRES: "true", HTTP_HEADER_TIMEOUT_MS: "500" });
  const second = await startAll(secondEnv);
  for (const port of ["PORT", "GATEWAY_OPS_PORT", "LEDGER_PORT", "HOLD_PORT", "NOTIFICATION_PORT"])
    expect(await closedAfterSilence(Number(secondEnv[port])), port).toBeLessThan(3_000);
  const again = restClient(second.restUrl, account.api_key);
  expect(await balances(again, alice)).toEqual(expectedAlice);
  expect(await balances(again, bob)).toEqual(expectedBob);
  expect((await again.get("/transactions", { entity_id: alice, limit: "100" })).body.transactions).toHaveLength(1 + 16 + 8);
  expect(await stop(second)).toBe(0);
}, 240_000);

it("traces when configured: the compiled processes load the SDK's chunk and export one trace per call", async () => {
  const otlp = await startOtlpReceiver();
  try {
    const env = await laptopEnv({
      LEDGER_EMBEDDED_POSTGRES: "true",
      // A database of its own is another installation: it gets a stream of its own too.
      LEDGER_DATA_DIR: mkdtempSync(join(dataRoot, "traced-")),
      NATS_STREAM: `${inject("natsStreamPrefix")}${tag}_traced`,
      NATS_SUBJECT_PREFIX: `test${tag}traced`,
      OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: otlp.tracesUrl,
      OTEL_BSP_SCHEDULE_DELAY: "100",
    });
    const running = await startAll(env);
    const { stdout } = await run(process.execPath, [CLI, "accounts", "create", "--name", "Traced", "--json"], {
      cwd: ROOT,
      env: { ...env, DATABASE_URL: running.databaseUrl },
    });
    const api = restClient(running.restUrl, (JSON.parse(stdout) as { api_key: string }).api_key);
    expect((await api.post("/entity", { entity_name: "Traced", entity_type: "customer" })).status).toBe(200);
    await expect
      .poll(() => {
        const gateway = otlp.spans().find((s) => s.service === "gateway" && s.kind === 2);
        return gateway ? otlp.spans().some((s) => s.service === "ledger" && s.traceId === gateway.traceId) : false;
      })
      .toBe(true);
    expect(await stop(running)).toBe(0);
  } finally {
    await otlp.close();
  }
}, 240_000);

it("stops with a message naming DATABASE_URL when the database it names does not answer", async () => {
  const port = await freePort();
  const env = await laptopEnv({ DATABASE_URL: `postgres://127.0.0.1:${port}/ledger` });
  const failed = await run(process.execPath, [START_ALL], { cwd: ROOT, env }).then(
    () => undefined,
    (err: { code: number; stderr: string }) => err,
  );
  expect(failed?.code).toBe(1);
  expect(failed?.stderr).toMatch(/DATABASE_URL names a server at 127\.0\.0\.1:\d+ and nothing answers there/);
  expect(failed?.stderr).not.toMatch(/Database: embedded/);
}, 60_000);

it("is what `npm start` runs: the compiled script on plain node, no TypeScript loader in its command or its code", () => {
  const pkg = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as { scripts: Record<string, string> };
  const steps = pkg.scripts["start"]!.split("&&").map((step) => step.trim());
  expect(steps.at(-2)).toBe("node scripts/build.mjs --if-changed");
  // glibc's malloc capped at two arenas, as the image does, with every block of 128 KiB or more
  // mapped on its own (returned to the system when freed), and V8's young generation at a quarter
  // of its default, and a heap limit just under 2 GB, below which V8 grows the old generation by at
  // most about twice instead of four times; the caller's own values win (docs/operations.md#memory).
  // NODE_OPTIONS carries those two flags and whatever the caller's NODE_OPTIONS holds, nothing else;
  // allocation-site pretenuring is off on node's command line, where V8 takes it
  // (docs/decisions/no-allocation-site-pretenuring.md).
  expect(steps.at(-1)).toBe(
    `MALLOC_ARENA_MAX=\${MALLOC_ARENA_MAX:-2} MALLOC_MMAP_THRESHOLD_=\${MALLOC_MMAP_THRESHOLD_:-131072} ` +
      `NODE_OPTIONS="--max-semi-space-size=4 --max-old-space-size=1900 \${NODE_OPTIONS:-}" node --no-allocation-site-pretenuring dist/start-all.js`,
  );
  expect(pkg.scripts["start"]).not.toMatch(/tsx|ts-node|--import|--loader|--require/);
  // The bundle imports no TypeScript source and no loader: every import left in it is node's, PGlite's
  // or one of the build's own chunks beside it, and so on through those chunks.
  const graph = bundleGraph("start-all.js");
  expect(graph.files.size).toBeGreaterThan(1);
  for (const [file, specifier] of graph.foreign) {
    const ok = specifier.startsWith("node:") || builtinModules.includes(specifier) || specifier.startsWith("@electric-sql/pglite");
    expect(ok, `dist/${file} imports ${specifier}`).toBe(true);
  }
});

/** What a compiled entry point loads: dist/ files through static and dynamic imports, and any other specifier. */
function bundleGraph(entry: string, follow: "static" | "all" = "all"): { files: Set<string>; foreign: Array<[string, string]> } {
  const files = new Set<string>();
  const foreign: Array<[string, string]> = [];
  const visit = (file: string) => {
    if (files.has(file)) return;
    files.add(file);
    const code = readFileSync(join(ROOT, "dist", file), "utf8");
    for (const m of code.matchAll(
      /^\s*(?:import|export)\b[^"'`;]*?\bfrom\s*["']([^"']+)["']|^\s*import\s*["']([^"']+)["']|\bimport\(\s*["']([^"']+)["']\s*\)/gm,
    )) {
      const specifier = m[1] ?? m[2] ?? m[3]!;
      if (m[3] !== undefined && follow === "static") continue;
      if (specifier.startsWith("./")) visit(specifier.slice(2));
      else foreign.push([file, specifier]);
    }
  };
  visit(entry);
  return { files, foreign };
}

it("loads the OpenTelemetry SDK only when tracing is on: it is in no module a service imports statically", () => {
  for (const entry of ["start-all.js", "ledger.js", "hold.js", "notification.js", "gateway.js"]) {
    const loaded = [...bundleGraph(entry, "static").files].map((file) => readFileSync(join(ROOT, "dist", file), "utf8"));
    expect(
      loaded.some((code) => code.includes("startTracing")),
      entry,
    ).toBe(true);
    expect(
      loaded.some((code) => /\bvar BatchSpanProcessor = class\b|\bOTLPTraceExporter = class\b/.test(code)),
      entry,
    ).toBe(false);
  }
  const all = [...bundleGraph("start-all.js").files].map((file) => readFileSync(join(ROOT, "dist", file), "utf8"));
  expect(all.some((code) => /\bvar BatchSpanProcessor = class\b/.test(code))).toBe(true);
});

it("compiles to ASCII only, which V8 keeps at one byte a character", () => {
  for (const file of readdirSync(join(ROOT, "dist")).filter((name) => name.endsWith(".js"))) {
    const code = readFileSync(join(ROOT, "dist", file), "utf8");
    const at = code.search(/[\u0080-\uffff]/);
    expect(at, `dist/${file}: ${code.slice(Math.max(0, at - 60), at + 20)}`).toBe(-1);
  }
});

/**
 * The running process is node on the compiled script with no flags, has no loader in its
 * environment, and started no child (tsx runs a script in a child node process).
 */
function expectNoTypeScriptLoader(pid: number): void {
  const argv = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").filter(Boolean);
  expect(argv).toEqual([process.execPath, START_ALL]);
  const environ = readFileSync(`/proc/${pid}/environ`, "utf8").split("\0");
  expect(environ.find((v) => v.startsWith("NODE_OPTIONS="))?.slice("NODE_OPTIONS=".length) ?? "").not.toMatch(
    /tsx|loader|--import|--require/,
  );
  const children = readdirSync(`/proc/${pid}/task`).flatMap((task) =>
    readFileSync(`/proc/${pid}/task/${task}/children`, "utf8").trim().split(/\s+/).filter(Boolean),
  );
  expect(children, "child processes of start-all").toEqual([]);
}
