// The system under test, compiled (scripts/build.mjs) and started in one of two layouts: as four
// child processes, as deployed, so each one's CPU and peak memory can be read from /proc and
// attributed to it; or as the one process `npm start` runs (dist/start-all.js), where the gateway
// and the services call each other in memory and every reading is that process's.
import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { closeSync, mkdirSync, openSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseAllDocuments } from "yaml";
import { freePort } from "@ledger/testing";
import { buildAll, isCurrent } from "../../scripts/build.mjs";
import { deleteStream } from "./backlog.js";

/** The four processes, in start order. */
export const SERVICES = ["ledger", "hold", "notification", "gateway"] as const;
export type ServiceName = (typeof SERVICES)[number];

/** Separate processes, as deployed, or the one process of `npm start`. */
export const LAYOUTS = ["processes", "one-process"] as const;
export type Layout = (typeof LAYOUTS)[number];

/** The compiled entry points (dist/, from scripts/build.mjs), as the image and `npm start` run them. */
const ENTRY: Record<ServiceName, string> = {
  ledger: "dist/ledger.js",
  hold: "dist/hold.js",
  notification: "dist/notification.js",
  gateway: "dist/gateway.js",
};
const ONE_PROCESS_ENTRY = "dist/start-all.js";
/**
 * A variable the image's runtime stage sets (`ENV NAME=value` or `ENV NAME="a value"` after the
 * Dockerfile's last FROM), read there so the two cannot drift.
 */
function imageEnv(repoRoot: string, name: string): string | undefined {
  const dockerfile = readFileSync(join(repoRoot, "Dockerfile"), "utf8");
  const runtime = dockerfile.slice(dockerfile.lastIndexOf("\nFROM "));
  const value = new RegExp(`^ENV ${name}=(.*)$`, "m").exec(runtime)?.[1];
  return value?.startsWith('"') && value.endsWith('"') ? value.slice(1, -1) : value;
}

/** package.json's start script: what `npm start` runs. */
function npmStartScript(repoRoot: string): string {
  const pkg = JSON.parse(readFileSync(join(repoRoot, "package.json"), "utf8")) as { scripts?: Record<string, string> };
  return pkg.scripts?.["start"] ?? "";
}

/**
 * The node options `npm start` gives its one process (`NODE_OPTIONS="<these> ${NODE_OPTIONS:-}"` in
 * package.json's start script), read there so the one-process layout runs as `npm start` does.
 */
function npmStartNodeOptions(repoRoot: string): string {
  const options = /NODE_OPTIONS="([^"$]*)/.exec(npmStartScript(repoRoot))?.[1]?.trim();
  if (!options) throw new Error('package.json: the start script sets no NODE_OPTIONS="..."');
  return options;
}

/**
 * The node flags `npm start` puts on its one process's command line (`node <these> dist/start-all.js`
 * in package.json's start script): V8 flags that NODE_OPTIONS does not take.
 */
function npmStartNodeFlags(repoRoot: string): string[] {
  const flags = new RegExp(`\\bnode((?: --[^ ]+)*) ${ONE_PROCESS_ENTRY.replace(".", "\\.")}`).exec(npmStartScript(repoRoot))?.[1];
  if (flags === undefined) throw new Error(`package.json: the start script does not run node ... ${ONE_PROCESS_ENTRY}`);
  return flags.split(" ").filter(Boolean);
}

/**
 * The default package.json's start script gives the variable `name` (`NAME=${NAME:-value}`), so the
 * one-process layout runs with what `npm start` sets.
 */
function npmStartDefault(repoRoot: string, name: string): string {
  const value = new RegExp(`\\b${name}=\\$\\{${name}:-([^}]*)\\}`).exec(npmStartScript(repoRoot))?.[1];
  if (value === undefined) throw new Error(`package.json: the start script sets no ${name}=\${${name}:-...}`);
  return value;
}

/**
 * The value a layout's processes get for the environment variable `name` when the bench's own
 * environment has none: the image's `ENV` apart, `npm start`'s default in one process.
 */
function layoutDefault(repoRoot: string, layout: Layout, name: string): string {
  if (layout === "one-process") return npmStartDefault(repoRoot, name);
  const value = imageEnv(repoRoot, name);
  if (value === undefined) throw new Error(`Dockerfile: the runtime stage sets no ENV ${name}=...`);
  return value;
}

/**
 * The node flags a service's Kubernetes manifest gives it before its entry point (`command:
 * ["node", ...flags, "dist/<name>.js"]` in deploy/base/<name>.yaml), read there so the processes
 * layout runs each service as deployed.
 */
function deployedNodeFlags(repoRoot: string, name: ServiceName): string[] {
  const file = `deploy/base/${name}.yaml`;
  type Manifest = { kind?: string; spec?: { template?: { spec?: { containers?: { name?: string; command?: unknown }[] } } } };
  const manifests = parseAllDocuments(readFileSync(join(repoRoot, file), "utf8")).map((doc) => {
    if (doc.errors.length > 0) throw new Error(`${file}: ${doc.errors.map((e) => e.message).join("; ")}`);
    return doc.toJS() as Manifest | null;
  });
  const deployment = manifests.find((m) => m?.kind === "Deployment");
  const command = deployment?.spec?.template?.spec?.containers?.find((c) => c.name === name)?.command;
  const valid = Array.isArray(command) && command.length >= 2 && command[0] === "node" && command.every((a) => typeof a === "string");
  if (!valid) throw new Error(`${file}: the Deployment's ${name} container has no command: ["node", ..., entry]`);
  return (command as string[]).slice(1, -1);
}

// Every service process a run started and that has not exited, and every stream it made. A bench
// stopped by a signal or an error must not leave them behind: the next run drops and recreates the
// same database, an old process reconnects to it, and (with another run's secret key) claims the
// new run's deliveries and fails every one of them; and each stream reserves 16 GiB of the NATS
// store, so a few left behind fail every later run with "insufficient storage resources".
const running = new Set<ChildProcess>();
const streams = new Map<string, string>();
let exitHooked = false;
function track(child: ChildProcess): void {
  running.add(child);
  child.once("exit", () => running.delete(child));
  if (exitHooked) return;
  exitHooked = true;
  process.once("exit", killRunning);
  for (const signal of ["SIGINT", "SIGTERM"] as const) {
    process.once(signal, () => {
      killRunning();
      const timeout = new Promise((resolve) => setTimeout(resolve, 5_000).unref());
      const removed = Promise.all([...streams].map(([stream, natsUrl]) => deleteStream(natsUrl, stream).catch(() => {})));
      void Promise.race([removed, timeout]).finally(() => process.exit(signal === "SIGINT" ? 130 : 143));
    });
  }
}
function killRunning(): void {
  for (const c of running) c.kill("SIGKILL");
}

/** The running system: where each process listens, and its pid. */
export interface System {
  layout: Layout;
  databaseUrl: string;
  natsUrl: string;
  stream: string;
  urls: Record<ServiceName, string>;
  /** REST base, ending in /v1. */
  restUrl: string;
  /** Each service's process: the same pid for all four in the one-process layout. */
  pids: Record<ServiceName, number>;
  logDir: string;
  /**
   * Pauses (SIGSTOP) or resumes (SIGCONT) one process, and its replicas: how a backlog is built for
   * the drain test. Processes layout only: in one process it would pause everything.
   */
  signal(name: ServiceName, signal: "SIGSTOP" | "SIGCONT"): void;
  /** Starts one more notification process on the same database and stream; answers its pid. Processes layout only. */
  startNotificationReplica(): Promise<number>;
  /**
   * Starts one more ledger process on the same database and stream, with `extraEnv` over the
   * system's environment (a setting to compare); answers its URL and pid. Processes layout only.
   */
  startLedgerReplica(extraEnv: Record<string, string>): Promise<{ url: string; pid: number }>;
  /** The CPU time so far of every process of the system (replicas included), Postgres, NATS and the bench. */
  cpuSnapshot(): CpuSnapshot;
  stop(): Promise<void>;
}

export interface SystemOptions {
  databaseUrl: string;
  natsUrl: string;
  repoRoot: string;
  /** PEM file the notification process trusts (NODE_EXTRA_CA_CERTS), for the HTTPS receiver. */
  caFile: string;
  layout: Layout;
}

/** The environment every process of the run starts with: its ports, database, stream, and each layout's node and malloc settings. */
function systemEnv(
  options: SystemOptions,
  tag: string,
  stream: string,
  ports: Record<ServiceName | "gatewayOps", number>,
  urls: Record<ServiceName, string>,
): Record<string, string> {
  const env: Record<string, string> = {
    ...(process.env as Record<string, string>),
    DATABASE_URL: options.databaseUrl,
    NATS_URL: options.natsUrl,
    NATS_STREAM: stream,
    NATS_SUBJECT_PREFIX: `bench${tag}`,
    // A full run stores a few million events; the 1 GiB default would stop them midway.
    NATS_STREAM_MAX_BYTES: process.env["NATS_STREAM_MAX_BYTES"] ?? String(16 * 1024 ** 3),
    LOG_LEVEL: process.env.BENCH_LOG_LEVEL ?? "warn",
    SERVICE_TOKEN: `bench-service-token-${randomBytes(8).toString("hex")}`,
    LEDGER_PORT: String(ports.ledger),
    HOLD_PORT: String(ports.hold),
    NOTIFICATION_PORT: String(ports.notification),
    PORT: String(ports.gateway),
    GATEWAY_OPS_PORT: String(ports.gatewayOps),
    // The benchmark is one API key at full speed: the per-key limit would measure itself.
    GATEWAY_RATE_LIMIT_PER_SECOND: "0",
    GATEWAY_HOST: "127.0.0.1",
    // Apart, each process finds the others at these; in one process, unset, so that the gateway and
    // the services call each other in memory as `npm start` does (LEDGER_INTERNAL_CALLS=http in the
    // bench's environment measures the same process over loopback HTTP/2 instead).
    ...(options.layout === "processes" ? { LEDGER_URL: urls.ledger, HOLD_URL: urls.hold, NOTIFICATION_URL: urls.notification } : {}),
    // glibc's malloc as the image (Dockerfile) and `npm start` (package.json) set it: two arenas, and
    // large blocks mapped on their own. The bench's own environment wins.
    MALLOC_ARENA_MAX: process.env["MALLOC_ARENA_MAX"] ?? layoutDefault(options.repoRoot, options.layout, "MALLOC_ARENA_MAX"),
    MALLOC_MMAP_THRESHOLD_:
      process.env["MALLOC_MMAP_THRESHOLD_"] ?? layoutDefault(options.repoRoot, options.layout, "MALLOC_MMAP_THRESHOLD_"),
    // Apart, each process has the image's smaller young generation (Dockerfile's NODE_OPTIONS),
    // and its manifest's node flags on the command line (deployedNodeFlags), which win over it;
    // the one process has `npm start`'s NODE_OPTIONS, and the bench's own after them win, as they
    // would given to `npm start`. A flag in BENCH_NODE_ARGS, on the command line, wins over both.
    NODE_OPTIONS:
      options.layout === "processes"
        ? [process.env["NODE_OPTIONS"], imageEnv(options.repoRoot, "NODE_OPTIONS")].filter(Boolean).join(" ")
        : [npmStartNodeOptions(options.repoRoot), process.env["NODE_OPTIONS"]].filter(Boolean).join(" "),
    NOTIFICATION_SECRET_KEY: randomBytes(32).toString("base64"),
    WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true",
  };
  // A bench that inherits NODE_ENV=production would refuse the generated development defaults.
  delete env["NODE_ENV"];
  if (options.layout === "one-process") for (const name of ["LEDGER_URL", "HOLD_URL", "NOTIFICATION_URL"]) delete env[name];
  return env;
}

/**
 * Compiles what changed, then starts the system: in the processes layout the ledger, then hold and
 * notification, then the gateway, each waiting for /readyz; in one process, `dist/start-all.js`
 * until the gateway and the ledger are ready.
 */
export async function startSystem(options: SystemOptions): Promise<System> {
  if (!isCurrent()) await buildAll();
  const tag = randomBytes(3).toString("hex");
  const stream = `BENCH_${tag}`;
  const ports = {
    ledger: await freePort(),
    hold: await freePort(),
    notification: await freePort(),
    gateway: await freePort(),
    gatewayOps: await freePort(),
  };
  const urls: Record<ServiceName, string> = {
    ledger: `http://127.0.0.1:${ports.ledger}`,
    hold: `http://127.0.0.1:${ports.hold}`,
    notification: `http://127.0.0.1:${ports.notification}`,
    gateway: `http://127.0.0.1:${ports.gateway}`,
  };
  const env = systemEnv(options, tag, stream, ports, urls);
  const logDir = join(tmpdir(), `ledger-bench-${tag}`);
  mkdirSync(logDir, { recursive: true });
  streams.set(stream, options.natsUrl);
  const system = new RunningSystem(options, stream, ports, urls, env, logDir);
  try {
    await system.startAll();
  } catch (err) {
    await system.stop();
    // The services may have made the run's stream before one of them failed.
    await deleteStream(options.natsUrl, stream).catch(() => {});
    throw err;
  }
  return system;
}

/** The system's processes: started, paused, joined by replicas and stopped. */
class RunningSystem implements System {
  readonly layout: Layout;
  readonly databaseUrl: string;
  readonly natsUrl: string;
  readonly restUrl: string;
  pids!: Record<ServiceName, number>;
  private readonly children = new Map<ServiceName, ChildProcess>();
  private readonly replicas: ChildProcess[] = [];
  private readonly ledgerReplicas: ChildProcess[] = [];
  /**
   * Extra node flags for every service, for profiling: BENCH_NODE_ARGS="--cpu-prof --cpu-prof-dir=/tmp/prof".
   * They come after a manifest's own flags, so they win.
   */
  private readonly nodeArgs = (process.env["BENCH_NODE_ARGS"] ?? "").split(/\s+/).filter(Boolean);

  constructor(
    private readonly options: SystemOptions,
    readonly stream: string,
    private readonly ports: Record<ServiceName | "gatewayOps", number>,
    readonly urls: Record<ServiceName, string>,
    private readonly env: Record<string, string>,
    readonly logDir: string,
  ) {
    this.layout = options.layout;
    this.databaseUrl = options.databaseUrl;
    this.natsUrl = options.natsUrl;
    this.restUrl = `${urls.gateway}/v1`;
  }

  /** Starts every service in its layout, and notes their pids. */
  async startAll(): Promise<void> {
    if (this.layout === "one-process") {
      const child = await this.spawnReady(
        ONE_PROCESS_ENTRY,
        npmStartNodeFlags(this.options.repoRoot),
        "all",
        { ...this.env, NODE_EXTRA_CA_CERTS: this.options.caFile },
        [this.ports.ledger, this.ports.gatewayOps],
      );
      for (const name of SERVICES) this.children.set(name, child);
    } else {
      // The ledger creates the database and its schema; the others add theirs beside it.
      await this.start("ledger");
      await Promise.all([this.start("hold"), this.start("notification")]);
      await this.start("gateway");
    }
    const pid = (name: ServiceName) => this.children.get(name)!.pid!;
    this.pids = { ledger: pid("ledger"), hold: pid("hold"), notification: pid("notification"), gateway: pid("gateway") };
  }

  private async start(name: ServiceName): Promise<void> {
    this.children.set(name, await this.launch(name, name, this.ports[name]));
  }

  /** Starts one service as deployed, with its log in <logName>.log; the gateway answers /readyz on its ops port only. */
  private launch(name: ServiceName, logName: string, port: number): Promise<ChildProcess> {
    const env =
      name === "notification" ? { ...this.env, NODE_EXTRA_CA_CERTS: this.options.caFile, NOTIFICATION_PORT: String(port) } : this.env;
    const readyPort = name === "gateway" ? this.ports.gatewayOps : port;
    return this.spawnReady(ENTRY[name], deployedNodeFlags(this.options.repoRoot, name), logName, env, [readyPort]);
  }

  /** Starts `entry` with its output in <logName>.log and waits until each of `readyPorts` answers /readyz. */
  private async spawnReady(
    entry: string,
    flags: string[],
    logName: string,
    childEnv: Record<string, string>,
    readyPorts: number[],
  ): Promise<ChildProcess> {
    const logFile = join(this.logDir, `${logName}.log`);
    const log = openSync(logFile, "a");
    const child = spawn(process.execPath, [...flags, ...this.nodeArgs, entry], {
      cwd: this.options.repoRoot,
      env: childEnv,
      stdio: ["ignore", log, log],
    });
    track(child);
    closeSync(log);
    try {
      for (const port of readyPorts) await waitReady(logName, `http://127.0.0.1:${port}`, child, logFile);
    } catch (err) {
      child.kill("SIGKILL");
      throw err;
    }
    return child;
  }

  private processesOnly(what: string): void {
    if (this.layout === "one-process") throw new Error(`${what}: one process runs every service, so this would affect them all`);
  }

  signal(name: ServiceName, signal: "SIGSTOP" | "SIGCONT"): void {
    this.processesOnly("signal");
    this.children.get(name)?.kill(signal);
    if (name === "notification") for (const replica of this.replicas) replica.kill(signal);
  }

  async startNotificationReplica(): Promise<number> {
    this.processesOnly("startNotificationReplica");
    const child = await this.launch("notification", `notification-${this.replicas.length + 2}`, await freePort());
    this.replicas.push(child);
    return child.pid!;
  }

  async startLedgerReplica(extraEnv: Record<string, string>): Promise<{ url: string; pid: number }> {
    this.processesOnly("startLedgerReplica");
    const port = await freePort();
    const child = await this.spawnReady(
      ENTRY.ledger,
      deployedNodeFlags(this.options.repoRoot, "ledger"),
      `ledger-${this.ledgerReplicas.length + 2}`,
      Object.assign({}, this.env, extraEnv, { LEDGER_PORT: String(port) }),
      [port],
    );
    this.ledgerReplicas.push(child);
    return { url: `http://127.0.0.1:${port}`, pid: child.pid! };
  }

  cpuSnapshot(): CpuSnapshot {
    const pidsOf = (children: ChildProcess[]) => children.map((child) => child.pid!);
    return cpuSnapshot(this.pids, pidsOf(this.replicas), pidsOf(this.ledgerReplicas));
  }

  async stop(): Promise<void> {
    // Reverse order: the gateway stops taking requests before the services behind it go.
    const services = [...SERVICES].reverse().map((name) => this.children.get(name));
    for (const child of [...this.replicas, ...this.ledgerReplicas, ...services]) {
      // In one process, the four names share one child: stopped at the first, skipped after.
      if (!child || child.exitCode !== null || child.signalCode !== null) continue;
      child.kill("SIGCONT");
      await new Promise<void>((resolve) => {
        const timer = setTimeout(() => {
          child.kill("SIGKILL");
        }, 10_000);
        child.once("exit", () => {
          clearTimeout(timer);
          resolve();
        });
        child.kill("SIGTERM");
      });
    }
  }
}

async function waitReady(name: string, url: string, child: ChildProcess, logFile: string): Promise<void> {
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline) {
    if (child.exitCode !== null || child.signalCode !== null) {
      throw new Error(`${name} exited during start (code ${child.exitCode}); its log:\n${tail(logFile)}`);
    }
    const ready = await fetch(`${url}/readyz`).then(
      (r) => r.ok,
      () => false,
    );
    if (ready) return;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error(`${name} was not ready within 60 s; its log:\n${tail(logFile)}`);
}

/** The last lines of a log, for an error message. */
export function tail(file: string, lines = 30): string {
  try {
    return readFileSync(file, "utf8").trimEnd().split("\n").slice(-lines).join("\n");
  } catch {
    return "(no log)";
  }
}

// ---- /proc readings -------------------------------------------------------------------------

const TICKS_PER_SECOND = 100; // USER_HZ: 100 on every Linux this runs on (getconf CLK_TCK)

/** Peak resident memory (VmHWM) in MB, or undefined when the process is gone. */
export function peakRssMb(pid: number): number | undefined {
  try {
    const status = readFileSync(`/proc/${pid}/status`, "utf8");
    const match = /^VmHWM:\s+(\d+) kB/m.exec(status);
    return match ? Number(match[1]) / 1024 : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Resets VmHWM to the current RSS (clear_refs 5), so each workload reports its own peak rather than
 * the highest since start. Returns false where the kernel does not allow it; peaks are then cumulative.
 */
export function resetPeakRss(pid: number): boolean {
  try {
    writeFileSync(`/proc/${pid}/clear_refs`, "5");
    return true;
  } catch {
    return false;
  }
}

/** CPU time (user + system) of one process, in seconds. */
export function cpuSeconds(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return (Number(fields[11]) + Number(fields[12])) / TICKS_PER_SECOND;
  } catch {
    return 0;
  }
}

/** Pids whose command name is `comm` (postgres backends, nats-server), to attribute their CPU too. */
export function pidsNamed(comm: string): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (readFileSync(`/proc/${entry}/comm`, "utf8").trim() === comm) pids.push(Number(entry));
    } catch {
      // Gone between readdir and read.
    }
  }
  return pids;
}

/**
 * Everything whose CPU a workload's report shows: the four services, Postgres, NATS, and this
 * process (the load generator), which shares the machine's cores with them as pgbench's client does.
 */
export type CpuSource = ServiceName | "postgres" | "nats" | "bench";

/** CPU seconds per pid of the four services, and of every postgres and nats-server process. */
export interface CpuSnapshot {
  at: number;
  pids: Record<CpuSource, Map<number, number>>;
}

/**
 * Takes a CPU snapshot (`System.cpuSnapshot` takes one of its own processes); `cpuPercent(a, b)`
 * gives each source's share of one core between two. `notificationReplicas` count under
 * notification beside its first process.
 */
function cpuSnapshot(pids: Record<ServiceName, number>, notificationReplicas: number[] = [], ledgerReplicas: number[] = []): CpuSnapshot {
  const of = (list: number[]) => new Map(list.map((pid) => [pid, cpuSeconds(pid)]));
  return {
    at: performance.now(),
    pids: {
      ledger: of([pids.ledger, ...ledgerReplicas]),
      hold: of([pids.hold]),
      notification: of([pids.notification, ...notificationReplicas]),
      gateway: of([pids.gateway]),
      postgres: of(pidsNamed("postgres")),
      nats: of(pidsNamed("nats-server")),
      bench: of([process.pid]),
    },
  };
}

/**
 * Percent of one core each source used between two snapshots. Only processes alive at both count:
 * a Postgres backend or autovacuum worker that came or went in between would otherwise add its
 * whole life's CPU, or take it away.
 */
export function cpuPercent(from: CpuSnapshot, to: CpuSnapshot): Record<CpuSource, number> {
  const wall = (to.at - from.at) / 1000;
  const out = {} as Record<CpuSource, number>;
  for (const key of Object.keys(to.pids) as CpuSource[]) {
    let seconds = 0;
    for (const [pid, after] of to.pids[key]) {
      const before = from.pids[key].get(pid);
      if (before !== undefined) seconds += after - before;
    }
    out[key] = wall > 0 ? Math.round((seconds / wall) * 100) : 0;
  }
  return out;
}
