import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import { createWriteStream, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync, type WriteStream } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import postgres from "postgres";
import { afterAll, expect, inject, it, vi } from "vitest";
import { createAccount } from "@ledger/ledger-service";
import { freePort, ownNats, startWebhookReceiver, type OwnNats, type WebhookReceiver } from "@ledger/testing";
import { ledgerViolations, restClient, schemaClient } from "./index.js";

// A bank workload under faults, Jepsen style. Clients run transfers, pending
// transactions settled or canceled, holds captured or released, each with an Idempotency-Key and
// retried on failure, while the test SIGKILLs and restarts each service, stops NATS, and (with
// FAULTS_POSTGRES=1) stops and restarts Postgres. A service that exits without the test killing it
// is a broken promise too. Then it checks every promise and names any it finds broken.

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const SECONDS = Number(process.env["FAULTS_SECONDS"] ?? 30);
const SERVICES = ["ledger", "hold", "notification", "gateway"] as const;
type Service = (typeof SERVICES)[number];
const ENTRY: Record<Service, string> = {
  ledger: "services/ledger/src/main.ts",
  hold: "services/hold/src/main.ts",
  notification: "services/notification/src/main.ts",
  gateway: "gateway/src/main.ts",
};

const children = new Map<Service, ChildProcess>();
// Exits the test did not cause: a service must outlive any fault of its dependencies.
const unexpectedExits: string[] = [];
const killing = new Set<ChildProcess>();
let nats: OwnNats | undefined;
let receiver: WebhookReceiver | undefined;
let tempDir: string | undefined;
// Each service's log (warnings and errors, every start appended), kept when the test fails.
const logs = new Map<Service, WriteStream>();
let failed = true;

afterAll(async () => {
  for (const name of SERVICES) await kill(name);
  await nats?.dispose();
  await receiver?.close();
  await Promise.all([...logs.values()].map((log) => new Promise((resolve) => log.end(resolve))));
  if (!tempDir) return;
  if (!failed) {
    rmSync(tempDir, { recursive: true, force: true });
    return;
  }
  // What the services said is the first thing to read when a promise broke: keep it, and show its end.
  console.log(`faults: the services' logs are kept in ${tempDir}`);
  for (const name of SERVICES) {
    const file = join(tempDir, `${name}.log`);
    if (!existsSync(file)) continue;
    const tail = readFileSync(file, "utf8").trimEnd().split("\n").slice(-15).join("\n");
    console.log(`--- ${name}.log (last lines)\n${tail}`);
  }
});

async function kill(name: Service) {
  const child = children.get(name);
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  await new Promise<void>((resolve) => {
    child.once("exit", () => resolve());
    killing.add(child);
    child.kill("SIGKILL");
  });
}

/**
 * The local cluster (postgresql-common) that serves `databaseUrl`: FAULTS_PG_CLUSTER names it
 * ("15/main", or "main" for the only version), else the one listening on the URL's port.
 */
function postgresCluster(databaseUrl: string): { version: string; name: string } {
  const named = process.env["FAULTS_PG_CLUSTER"];
  if (named) {
    const [version, name] = named.includes("/") ? named.split("/") : [readdirSync("/etc/postgresql")[0]!, named];
    return { version: version!, name: name! };
  }
  const port = new URL(databaseUrl).port || "5432";
  for (const line of execFileSync("pg_lsclusters", ["--no-header"], { encoding: "utf8" }).split("\n")) {
    const [version, name, clusterPort] = line.trim().split(/\s+/);
    if (clusterPort === port) return { version: version!, name: name! };
  }
  throw new Error(`FAULTS_POSTGRES=1: no local cluster listens on port ${port} of DATABASE_URL; set FAULTS_PG_CLUSTER`);
}

function pgCtlCluster(cluster: { version: string; name: string }, action: "start" | "stop" | "restart") {
  const mode = action === "start" ? [] : ["-m", "fast"];
  execFileSync("pg_ctlcluster", ["--skip-systemctl-redirect", ...mode, cluster.version, cluster.name, action], { stdio: "ignore" });
}

it(`keeps every promise through ${SECONDS} s of faults`, async () => {
  const databaseUrl = inject("databaseUrl");
  tempDir = mkdtempSync(join(tmpdir(), "ledger-faults-"));
  nats = await ownNats();
  await nats.start();
  receiver = await startWebhookReceiver();
  const caFile = join(tempDir, "ca.pem");
  writeFileSync(caFile, receiver.ca);
  const ports = Object.fromEntries(await Promise.all(SERVICES.map(async (s) => [s, await freePort()] as const))) as Record<Service, number>;
  const tag = randomBytes(3).toString("hex");
  const env: Record<string, string> = {
    ...(process.env as Record<string, string>),
    DATABASE_URL: databaseUrl,
    NATS_URL: nats.url,
    NATS_STREAM: `FAULTS_${tag}`,
    NATS_SUBJECT_PREFIX: `faults${tag}`,
    LOG_LEVEL: "warn",
    SERVICE_TOKEN: `faults-token-${tag}-0123456789`,
    LEDGER_PORT: String(ports.ledger),
    HOLD_PORT: String(ports.hold),
    NOTIFICATION_PORT: String(ports.notification),
    PORT: String(ports.gateway),
    GATEWAY_OPS_PORT: String(await freePort()),
    GATEWAY_HOST: "127.0.0.1",
    LEDGER_URL: `http://127.0.0.1:${ports.ledger}`,
    HOLD_URL: `http://127.0.0.1:${ports.hold}`,
    NOTIFICATION_URL: `http://127.0.0.1:${ports.notification}`,
    HOLD_RECOVERY_AFTER_MS: "1000",
    WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true",
    WEBHOOK_RETRY_SCHEDULE: "200ms,500ms,1s,2s,2s,2s,2s,2s,2s,2s",
    GATEWAY_RATE_LIMIT_PER_SECOND: "0",
    NODE_EXTRA_CA_CERTS: caFile,
  };
  const start = async (name: Service) => {
    const child = spawn(process.execPath, ["--import", "tsx", ENTRY[name]], { cwd: ROOT, env, stdio: ["ignore", "pipe", "pipe"] });
    const log = logs.get(name) ?? createWriteStream(join(tempDir!, `${name}.log`), { flags: "a" });
    logs.set(name, log);
    log.write(`${JSON.stringify({ test: "started", pid: child.pid, at: new Date().toISOString() })}\n`);
    child.stdout!.pipe(log, { end: false });
    let stderr = "";
    child.stderr!.on("data", (chunk: Buffer) => {
      stderr = (stderr + chunk.toString()).slice(-2_000);
      log.write(chunk);
    });
    child.once("exit", (code, signal) => {
      if (!killing.has(child))
        unexpectedExits.push(
          `${name} exited by itself (${signal ?? `status ${code}`}): ${stderr.trim().split("\n").slice(-5).join(" | ")}`,
        );
    });
    children.set(name, child);
    await vi.waitFor(
      async () => {
        if (!(await fetch(`http://127.0.0.1:${ports[name]}/healthz`).catch(() => null))?.ok) throw new Error(`${name} did not start`);
      },
      { timeout: 30_000, interval: 100 },
    );
  };
  for (const name of SERVICES) await start(name);

  const sql = schemaClient(databaseUrl, "ledger");
  const account = await createAccount(sql as never, "faults");
  const base = `http://127.0.0.1:${ports.gateway}/v1`;
  const api = restClient(base, account.api_key);

  const endpoint = await api.post("/webhooks", { url: receiver.endpoint("/bank") });
  expect(endpoint.status).toBe(200);
  const secrets = [endpoint.body.endpoint.secret as string];
  const entities: string[] = [];
  for (let i = 0; i < 6; i++) {
    const e = await api.post("/entity", { entity_name: `e${i}`, entity_type: "w" });
    entities.push(e.body.entity.entity_id);
    expect(
      (await api.post("/entity/fund", { entity_id: e.body.entity.entity_id, amount: 10_000 }, { "idempotency-key": `fund-${i}` })).status,
    ).toBe(200);
  }

  // A call with a key, retried on anything that is not an answer from the ledger's rules.
  const counts = { operations: 0, acknowledged: 0, refused: 0, retries: 0, gaveUp: 0, faults: 0 };
  const acknowledged = new Map<string, { kind: string; body: Record<string, unknown> }>();
  const attempted = new Map<string, string>();
  async function call(kind: string, path: string, body: Record<string, unknown>): Promise<Record<string, unknown> | undefined> {
    const key = `${kind}-${randomBytes(6).toString("hex")}`;
    attempted.set(key, kind);
    counts.operations++;
    for (let attempt = 0; attempt < 120; attempt++) {
      const res = await api
        .post(path, { ...body, ...(path === "/transaction" || path === "/hold" ? { description: key } : {}) }, { "idempotency-key": key })
        .catch(() => undefined);
      if (res && res.status < 500 && res.status !== 429) {
        if (res.status === 200) {
          counts.acknowledged++;
          acknowledged.set(key, { kind, body: res.body });
          return res.body;
        }
        counts.refused++;
        return undefined;
      }
      counts.retries++;
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
    counts.gaveUp++;
    return undefined;
  }
  const pick = () => entities[Math.floor(Math.random() * entities.length)]!;
  const other = (a: string) => entities[(entities.indexOf(a) + 1 + Math.floor(Math.random() * (entities.length - 1))) % entities.length]!;

  let running = true;
  const client = async () => {
    while (running) {
      const from = pick();
      const to = other(from);
      const amount = 1 + Math.floor(Math.random() * 50);
      const op = Math.random();
      if (op < 0.4) {
        await call("transfer", "/transaction", { amount, status: "posted", account: { from, to } });
      } else if (op < 0.7) {
        const created = await call("pending", "/transaction", { amount, account: { from, to } });
        const group = created?.["transaction_group_id"];
        if (group)
          await call(Math.random() < 0.5 ? "post" : "cancel", Math.random() < 0.5 ? "/transaction/post" : "/transaction/cancel", {
            transaction_group_id: group,
          });
      } else {
        const held = await call("hold", "/hold", { entity_id: from, amount: amount * 2 });
        const hold = (held?.["hold"] as { hold_id?: string } | undefined)?.hold_id;
        if (hold && Math.random() < 0.6) await call("capture", "/hold/capture", { hold_id: hold, amount, destination_entity_id: to });
        else if (hold) await call("release", "/hold/release", { hold_id: hold });
      }
    }
  };
  const cluster = process.env["FAULTS_POSTGRES"] === "1" && existsSync("/etc/postgresql") ? postgresCluster(databaseUrl) : undefined;
  const outage: string[] = [];
  const faults = async () => {
    const plan: Array<() => Promise<void>> = [
      ...SERVICES.map((name) => async () => {
        await kill(name);
        await new Promise((resolve) => setTimeout(resolve, 500));
        await start(name);
      }),
      async () => {
        await nats!.stop();
        await new Promise((resolve) => setTimeout(resolve, 2_000));
        await nats!.start();
      },
      ...(cluster
        ? [
            // While Postgres is away the services stay up, say so on /readyz, and answer 503 unavailable.
            async () => {
              pgCtlCluster(cluster, "stop");
              try {
                // A broken promise is recorded with the others, not thrown: the run goes on to check the rest.
                await vi
                  .waitFor(
                    async () => {
                      if ((await fetch(`http://127.0.0.1:${ports.ledger}/readyz`).catch(() => null))?.status !== 503)
                        throw new Error("still ready");
                    },
                    { timeout: 10_000, interval: 100 },
                  )
                  .catch(() => outage.push("the ledger's /readyz did not answer 503 while Postgres was stopped"));
                const res = await api
                  .post(
                    "/transaction",
                    { amount: 1, status: "posted", description: "outage", account: { from: entities[0], to: entities[1] } },
                    { "idempotency-key": `outage-${randomBytes(6).toString("hex")}` },
                  )
                  .catch((err: unknown) => ({ status: 0, body: { error: { code: String(err) } } }));
                if (res.status !== 503 || res.body?.error?.code !== "unavailable")
                  outage.push(
                    `a transfer while Postgres was stopped answered ${res.status} ${JSON.stringify(res.body?.error ?? res.body)}`,
                  );
              } finally {
                pgCtlCluster(cluster, "start");
              }
            },
            async () => pgCtlCluster(cluster, "restart"),
          ]
        : []),
    ];
    let i = 0;
    while (running) {
      await new Promise((resolve) => setTimeout(resolve, 1_500));
      if (!running) break;
      await plan[i++ % plan.length]!();
      counts.faults++;
      console.log(`faults: ${counts.faults} injected, ${counts.operations} operations, ${counts.retries} retries`);
    }
  };
  const faulting = faults();
  const clients = Array.from({ length: 6 }, client);
  await new Promise((resolve) => setTimeout(resolve, SECONDS * 1000));
  running = false;
  await faulting;
  await Promise.all(clients);
  for (const name of SERVICES) if (children.get(name)?.exitCode !== null || children.get(name)?.signalCode) await start(name);

  // Let everything settle: outboxes empty, hold work finished, every delivery ended.
  const holdSql = postgres(databaseUrl, { max: 1, onnotice: () => {}, connection: { search_path: "hold" } });
  const notificationSql = postgres(databaseUrl, { max: 1, onnotice: () => {}, connection: { search_path: "notification" } });
  let unsettled = "";
  const settled = await vi
    .waitFor(
      async () => {
        const [l] = await sql`select coalesce(sum(events), 0)::int as n from ledger.outbox_writes`;
        const [h] =
          await holdSql`select (select coalesce(sum(events), 0) from outbox_writes) + (select count(*) from holds where status in ('creating','releasing')) + (select count(*) from captures where status = 'pending') as n`;
        const [d] = await notificationSql`select count(*)::int as n from deliveries where status = 'pending'`;
        // Events on the stream not yet stored: a notification process killed while holding messages
        // leaves them unacknowledged until JetStream redelivers them (its ack wait, 30 s).
        const metrics = await fetch(`http://127.0.0.1:${ports.notification}/metrics`)
          .then((r) => r.text())
          .catch(() => "");
        const consumerPending = Number(/^jetstream_consumer_pending (\d+)/m.exec(metrics)?.[1] ?? NaN);
        const left = { outbox: Number(l!["n"]), holdWork: Number(h!["n"]), pendingDeliveries: Number(d!["n"]), consumerPending };
        unsettled = JSON.stringify(left);
        if (Object.values(left).some((n) => n !== 0)) throw new Error(`not settled: ${unsettled}`);
      },
      { timeout: 120_000, interval: 500 },
    )
    .then(
      () => true,
      () => false,
    );

  const violations: string[] = [...unexpectedExits, ...outage];
  if (!settled) violations.push(`the system did not settle within 120 s after the faults stopped; still owed: ${unsettled}`);
  for (const v of await ledgerViolations(sql as never, account.account_id)) violations.push(v);

  // Held equals what active holds still reserve.
  const held = await sql<
    { id: string; held: bigint }[]
  >`select id, held from entities where account_id = ${account.account_id} and not is_external`;
  const remaining = await holdSql<{ entity_id: string; r: string }[]>`
    select entity_id, sum(amount - captured_amount)::text as r from holds where account_id = ${account.account_id}
      and status in ('held', 'partially_captured') group by entity_id`;
  for (const e of held) {
    const r = BigInt(remaining.find((x) => x.entity_id === e.id)?.r ?? "0");
    if (e.held !== r) violations.push(`entity ${e.id}: held ${e.held} but active holds reserve ${r}`);
  }

  // Every keyed operation applied at most once, and exactly once when acknowledged.
  const groupsByKey = new Map(
    (
      await sql<{ description: string; n: number }[]>`
    select description, count(*)::int as n from transaction_groups where account_id = ${account.account_id} group by description`
    ).map((r) => [r.description, r.n]),
  );
  const holdsByKey = new Map(
    (
      await holdSql<{ description: string; n: number }[]>`
    select description, count(*)::int as n from holds where account_id = ${account.account_id} and status <> 'creating' group by description`
    ).map((r) => [r.description, r.n]),
  );
  for (const [key, kind] of attempted) {
    if (kind !== "transfer" && kind !== "pending" && kind !== "hold") continue;
    const n = (kind === "hold" ? holdsByKey : groupsByKey).get(key) ?? 0;
    if (n > 1) violations.push(`${key} was applied ${n} times`);
    if (acknowledged.has(key) && n !== 1) violations.push(`${key} was acknowledged but applied ${n} times`);
  }

  // Every committed group and hold change has exactly one stored event, and each reached the receiver with a valid signature.
  const events = await notificationSql<
    { id: string; type: string; body: string }[]
  >`select id, type, body from events where account_id = ${account.account_id}`;
  const createdPerGroup = new Map<string, number>();
  for (const e of events.filter((x) => x.type === "transaction.created")) {
    const group = JSON.parse(e.body).data.transaction_group_id as string;
    createdPerGroup.set(group, (createdPerGroup.get(group) ?? 0) + 1);
  }
  const groups = await sql<{ id: string }[]>`select id from transaction_groups where account_id = ${account.account_id}`;
  for (const g of groups)
    if (createdPerGroup.get(g.id) !== 1) violations.push(`group ${g.id} has ${createdPerGroup.get(g.id) ?? 0} transaction.created events`);
  const holdCreated = new Map<string, number>();
  for (const e of events.filter((x) => x.type === "hold.created")) {
    const hold = JSON.parse(e.body).data.hold_id as string;
    holdCreated.set(hold, (holdCreated.get(hold) ?? 0) + 1);
  }
  const holds = await holdSql<{ id: string }[]>`select id from holds where account_id = ${account.account_id} and status <> 'creating'`;
  for (const h of holds)
    if (holdCreated.get(h.id) !== 1) violations.push(`hold ${h.id} has ${holdCreated.get(h.id) ?? 0} hold.created events`);
  const received = new Map<string, boolean>();
  for (const r of receiver.received("/bank")) {
    const header = String(r.headers["x-service-signature"] ?? "");
    const t = /t=(\d+)/.exec(header)?.[1] ?? "";
    const valid = [...header.matchAll(/v1=([0-9a-f]{64})/g)].some(([, sig]) =>
      secrets.some((secret) => timingSafeEqual(Buffer.from(sig!, "hex"), createHmac("sha256", secret).update(`${t}.${r.body}`).digest())),
    );
    const id = JSON.parse(r.body).id as string;
    received.set(id, (received.get(id) ?? false) || valid);
  }
  for (const e of events)
    if (!received.get(e.id)) violations.push(`event ${e.id} (${e.type}) never reached the receiver with a valid signature`);

  console.log(
    `faults: ${counts.faults} injected; ${counts.operations} operations, ${counts.acknowledged} acknowledged, ` +
      `${counts.refused} refused by rules, ${counts.retries} retries, ${counts.gaveUp} given up; ` +
      `${groups.length} groups, ${holds.length} holds, ${events.length} events, ${receiver.received("/bank").length} deliveries received`,
  );
  await sql.end();
  await holdSql.end();
  await notificationSql.end();
  expect(violations, violations.slice(0, 20).join("\n")).toEqual([]);
  expect(counts.faults).toBeGreaterThan(0);
  expect(counts.acknowledged).toBeGreaterThan(10);
  failed = false;
}, 600_000);
