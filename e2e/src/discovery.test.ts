import { execFile, spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { Health } from "@ledger/proto/grpc/health/v1/health_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { NATS_SERVER_BIN, ownNats, type OwnNats } from "@ledger/testing";
import { startStack, type Stack } from "./index.js";

// Every RPC port answers gRPC server reflection (v1 and v1alpha) and the gRPC health protocol, to
// a real gRPC client with no copy of proto/: buf curl (Go's gRPC stack), spawned as a process.

const execFileAsync = promisify(execFile);
const BUF = fileURLToPath(new URL("../../node_modules/.bin/buf", import.meta.url));

/** Runs `buf curl` over gRPC (HTTP/2 without TLS); resolves with its exit code and output. */
async function bufCurl(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await execFileAsync(BUF, ["curl", "--protocol", "grpc", "--http2-prior-knowledge", ...args], {
      timeout: 30_000,
    });
    return { code: 0, stdout, stderr };
  } catch (err) {
    const failed = err as { code: number; stdout: string; stderr: string };
    return { code: failed.code, stdout: failed.stdout, stderr: failed.stderr };
  }
}

async function health(url: string, service = ""): Promise<string> {
  const result = await bufCurl("--reflect", "-d", JSON.stringify({ service }), `${url}/grpc.health.v1.Health/Check`);
  expect(result.code, result.stderr).toBe(0);
  return JSON.parse(result.stdout).status;
}

describe("reflection and health on every RPC port", () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack({ notification: {}, rpcRateLimit: { rateLimitPerSecond: 5, rateLimitBurst: 20 } });
  });
  afterAll(async () => stack?.close());

  const ports = () => ({
    ledger: { url: stack.ledgerUrl, service: "ledger.v1.LedgerService" },
    hold: { url: stack.hold!.server.url, service: "hold.v1.HoldService" },
    notification: { url: stack.notification!.server.url, service: "notification.v1.NotificationService" },
  });

  it("lists each port's services over reflection v1 and v1alpha, without an API key", async () => {
    for (const [name, { url, service }] of Object.entries(ports())) {
      for (const protocol of ["grpc-v1", "grpc-v1alpha"]) {
        const listed = await bufCurl("--reflect", "--reflect-protocol", protocol, "--list-services", url);
        expect(listed.code, `${name} ${protocol}: ${listed.stderr}`).toBe(0);
        const services = listed.stdout.trim().split("\n");
        expect(services, name).toEqual(
          expect.arrayContaining([
            service,
            "grpc.health.v1.Health",
            "grpc.reflection.v1.ServerReflection",
            "grpc.reflection.v1alpha.ServerReflection",
          ]),
        );
      }
    }
    const methods = await bufCurl("--reflect", "--list-methods", ports().ledger.url);
    expect(methods.stdout).toContain("ledger.v1.LedgerService/CreateTransaction");
    expect(methods.stdout).toContain("ledger.v1.IdentityService/Authenticate");
  });

  it("calls a method described only by reflection, with the API key", async () => {
    const programs = await bufCurl(
      "--reflect",
      "-H",
      `authorization: ${stack.account.api_key}`,
      "-d",
      "{}",
      `${stack.ledgerUrl}/ledger.v1.LedgerService/ListPrograms`,
    );
    expect(programs.code, programs.stderr).toBe(0);
    expect(JSON.parse(programs.stdout).programs).toEqual([expect.objectContaining({ programId: stack.account.program_id })]);
    // Reflection is open; the service's own methods still need a key.
    const anonymous = await bufCurl("--reflect", "-d", "{}", `${stack.ledgerUrl}/ledger.v1.LedgerService/ListPrograms`);
    expect(anonymous.code).not.toBe(0);
    expect(anonymous.stderr).toContain("unauthenticated");
  });

  it("answers SERVING for the server and each of its services, NOT_FOUND for a service it lacks", async () => {
    for (const { url, service } of Object.values(ports())) {
      expect(await health(url)).toBe("SERVING");
      expect(await health(url, service)).toBe("SERVING");
    }
    const unknown = await bufCurl("--reflect", "-d", '{"service":"no.such.Service"}', `${stack.ledgerUrl}/grpc.health.v1.Health/Check`);
    expect(unknown.code).not.toBe(0);
    expect(unknown.stderr).toContain("not_found");
  });

  it("rate-limits reflection and health like any call from the same address", async () => {
    // An in-process gRPC client, not 40 spawned processes: the budget (20 at once, 5 a second)
    // must be spent faster than it refills, which a loaded CI machine starting Go binaries is not.
    const health = createClient(Health, createGrpcTransport({ baseUrl: ports().hold.url }));
    const answers = await Promise.allSettled(Array.from({ length: 60 }, () => health.check({})));
    const refused = answers.filter((a) => a.status === "rejected").map((a) => ConnectError.from(a.reason));
    expect(refused.length).toBeGreaterThan(0);
    expect(refused.every((err) => err.code === Code.ResourceExhausted)).toBe(true);
    expect(answers.some((a) => a.status === "fulfilled")).toBe(true);
  });
});

describe.runIf(NATS_SERVER_BIN)("health when a dependency is down", () => {
  let stack: Stack | undefined;
  let nats: OwnNats | undefined;
  afterAll(async () => {
    await stack?.close();
    await nats?.dispose();
  });

  it("answers NOT_SERVING while NATS is stopped, and SERVING again once it is back", async () => {
    nats = await ownNats();
    await nats.start();
    stack = await startStack({ natsUrl: nats.url, notification: {} });
    const urls = [stack.ledgerUrl, stack.hold!.server.url, stack.notification!.server.url];
    for (const url of urls) expect(await health(url)).toBe("SERVING");
    // A Watch stream on the ledger tells each change as it happens.
    const watch = spawn(BUF, [
      "curl",
      "--protocol",
      "grpc",
      "--http2-prior-knowledge",
      "--reflect",
      "-d",
      "{}",
      `${stack.ledgerUrl}/grpc.health.v1.Health/Watch`,
    ]);
    let watched = "";
    watch.stdout.on("data", (chunk: Buffer) => (watched += chunk.toString()));
    const statuses = () => [...watched.matchAll(/"status": "(\w+)"/g)].map((m) => m[1]);
    await expect.poll(() => statuses().length).toBe(1);

    await nats.stop();
    for (const url of urls) {
      await expect.poll(() => health(url), { interval: 300, message: url }).toBe("NOT_SERVING");
      // /readyz says the same, naming the check.
      const readyz = await fetch(`${url}/readyz`);
      expect(readyz.status).toBe(503);
      expect(((await readyz.json()) as { checks: Record<string, string> }).checks["nats"]).toBe("unavailable");
    }

    await nats.start();
    for (const url of urls) await expect.poll(() => health(url), { timeout: 20_000, interval: 300, message: url }).toBe("SERVING");
    await expect.poll(() => statuses().length, { timeout: 10_000 }).toBe(3);
    watch.kill();
    expect(statuses()).toEqual(["SERVING", "NOT_SERVING", "SERVING"]);
  });
});
