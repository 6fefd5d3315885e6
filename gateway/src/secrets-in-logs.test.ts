import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, expect, it, vi } from "vitest";
import { inject } from "vitest";
import { freePort, startWebhookReceiver, type WebhookReceiver } from "@ledger/testing";
import { deleteStream, restClient } from "@ledger/e2e";

// No secret ever reaches a log line (SECURITY.md): the whole system runs as `pnpm start` does, at
// debug level, with its output captured; the API key (seeded through LEDGER_DEV_API_KEY, which
// this also tests), the service token and every webhook secret are then searched for in it.

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const devKey = `dev_${randomBytes(16).toString("hex")}`;
const serviceToken = `svc_${randomBytes(16).toString("hex")}`;
let child: ChildProcess;
let output = "";
let receiver: WebhookReceiver;
let base: string;
let tempDir: string | undefined;
let stream: string | undefined;

beforeAll(async () => {
  receiver = await startWebhookReceiver();
  const ports = {
    gateway: await freePort(),
    gatewayOps: await freePort(),
    ledger: await freePort(),
    hold: await freePort(),
    notification: await freePort(),
  };
  const tag = randomBytes(4).toString("hex");
  stream = `${inject("natsStreamPrefix")}LOGS_${tag}`;
  tempDir = mkdtempSync(join(tmpdir(), "ledger-logs-"));
  const caFile = join(tempDir, "receiver-ca.pem");
  writeFileSync(caFile, receiver.ca);
  child = spawn(process.execPath, ["--import", "tsx", "scripts/start-all.ts"], {
    cwd: ROOT,
    env: {
      ...process.env,
      DATABASE_URL: inject("databaseUrl"),
      NATS_URL: inject("natsUrl"),
      NATS_STREAM: stream,
      NATS_SUBJECT_PREFIX: `logs${tag}`,
      LOG_LEVEL: "debug",
      LEDGER_DEV_API_KEY: devKey,
      SERVICE_TOKEN: serviceToken,
      PORT: String(ports.gateway),
      GATEWAY_OPS_PORT: String(ports.gatewayOps),
      GATEWAY_HOST: "127.0.0.1",
      LEDGER_PORT: String(ports.ledger),
      HOLD_PORT: String(ports.hold),
      NOTIFICATION_PORT: String(ports.notification),
      WEBHOOK_ALLOW_PRIVATE_NETWORKS: "true",
      NODE_EXTRA_CA_CERTS: caFile,
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  child.stdout!.on("data", (chunk: Buffer) => (output += chunk.toString("utf8")));
  child.stderr!.on("data", (chunk: Buffer) => (output += chunk.toString("utf8")));
  base = `http://127.0.0.1:${ports.gateway}/v1`;
  await vi.waitFor(
    async () => {
      const ready = await fetch(`http://127.0.0.1:${ports.gatewayOps}/readyz`).catch(() => null);
      if (!ready?.ok) throw new Error(`the system did not start:\n${output.slice(-2_000)}`);
    },
    { timeout: 30_000, interval: 200 },
  );
}, 60_000);

afterAll(async () => {
  if (child && child.exitCode === null) {
    await new Promise<void>((resolve) => {
      child.once("exit", () => resolve());
      child.kill("SIGTERM");
    });
  }
  await receiver?.close();
  if (stream) await deleteStream(inject("natsUrl"), stream);
  if (tempDir) rmSync(tempDir, { recursive: true, force: true });
});

it("logs requests, failures and deliveries without any API key, service token or webhook secret", async () => {
  const api = restClient(base, devKey);
  const secrets: string[] = [devKey, serviceToken];
  const entity = await api.post("/entity", { entity_name: "w", entity_type: "w" });
  expect(entity.status).toBe(200);
  const created = await api.post("/webhooks", { url: receiver.endpoint("/logs") });
  expect(created.status).toBe(200);
  secrets.push(created.body.endpoint.secret);
  const rolled = await api.post("/webhooks/roll", { endpoint_id: created.body.endpoint.endpoint_id });
  secrets.push(rolled.body.endpoint.secret);
  await api.post("/entity/fund", { entity_id: entity.body.entity.entity_id, amount: 100 });
  await api.post("/hold", { entity_id: entity.body.entity.entity_id, amount: 10 });
  // Refused calls log too: a wrong key (a near miss of the real one), bad input, an unknown id.
  const wrongKey = devKey.slice(0, -1) + (devKey.endsWith("0") ? "1" : "0");
  expect((await restClient(base, wrongKey).get("/programs")).status).toBe(401);
  expect((await api.post("/entity/fund", { entity_id: "ent_x", amount: -1 })).status).toBe(400);
  await expect.poll(() => receiver.received("/logs").length).toBeGreaterThanOrEqual(2);

  // The logs did record the traffic, at debug level, so their silence about secrets means something.
  expect(output).toContain('"msg":"request"');
  expect(output).toContain('"msg":"rpc ok"');
  for (const secret of [...secrets, wrongKey]) {
    expect(output.includes(secret), `a secret appears in the logs`).toBe(false);
    // Nor the bearer form, nor the secret's body without its prefix.
    expect(output.includes(secret.slice(6))).toBe(false);
  }
});
