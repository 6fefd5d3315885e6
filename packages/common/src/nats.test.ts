import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connect } from "@nats-io/transport-node";
import { ownNats, testCertificate, type OwnNats } from "@ledger/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ConfigError, readInfraConfig } from "./config.js";
import { createLogger } from "./logger.js";
import { connectNats, natsConnectionOptions } from "./nats.js";

// NATS with a user, a password and TLS, as deploy/ runs it: every process connects with
// NATS_USER, NATS_PASSWORD and NATS_TLS_CA, and a client without them is refused.

describe("NATS with auth and TLS", () => {
  let nats: OwnNats;
  let dir: string;
  let caFile: string;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "ledger-nats-tls-"));
    const { cert, key } = testCertificate();
    caFile = join(dir, "ca.pem");
    writeFileSync(caFile, cert);
    writeFileSync(join(dir, "key.pem"), key);
    nats = await ownNats(["--user", "ledger", "--pass", "s3cret-pass", "--tls", "--tlscert", caFile, "--tlskey", join(dir, "key.pem")]);
    await nats.start();
  });
  afterAll(async () => {
    await nats?.dispose();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it("connects with the user, password and CA from the environment", async () => {
    const config = readInfraConfig({ NATS_URL: nats.url, NATS_USER: "ledger", NATS_PASSWORD: "s3cret-pass", NATS_TLS_CA: caFile });
    const handle = connectNats(config, "test", createLogger("test", "silent"));
    const nc = await handle.connected();
    expect(nc.info?.tls_required).toBe(true);
    expect(await handle.ping()).toBe(true);
    await handle.close();
  });

  it("is refused without the password, and without the CA", async () => {
    const noPassword = readInfraConfig({ NATS_URL: nats.url, NATS_TLS_CA: caFile });
    await expect(connect({ ...natsConnectionOptions(noPassword), timeout: 3_000 })).rejects.toThrow(/auth/i);
    const wrongPassword = readInfraConfig({ NATS_URL: nats.url, NATS_USER: "ledger", NATS_PASSWORD: "wrong-pass", NATS_TLS_CA: caFile });
    await expect(connect({ ...natsConnectionOptions(wrongPassword), timeout: 3_000 })).rejects.toThrow(/auth/i);
    const noCa = readInfraConfig({ NATS_URL: nats.url, NATS_USER: "ledger", NATS_PASSWORD: "s3cret-pass" });
    await expect(connect({ ...natsConnectionOptions(noCa), timeout: 3_000 })).rejects.toThrow();
  });
});

describe("NATS settings", () => {
  it("takes none by default, and a user only with its password", () => {
    expect(natsConnectionOptions(readInfraConfig({}))).toEqual({ servers: "nats://127.0.0.1:4222" });
    expect(() => readInfraConfig({ NATS_USER: "ledger" })).toThrow(/NATS_PASSWORD/);
    expect(() => readInfraConfig({ NATS_PASSWORD: "x" })).toThrow(/NATS_USER/);
    expect(() => readInfraConfig({ NATS_TLS_CA: "/nonexistent/ca.pem" })).toThrow(ConfigError);
  });

  it("never puts the password in a configuration error", () => {
    try {
      readInfraConfig({ NATS_PASSWORD: "do-not-echo-me" });
      throw new Error("no error");
    } catch (err) {
      expect((err as Error).message).not.toContain("do-not-echo-me");
    }
  });
});
