import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { randomBytes, randomUUID } from "node:crypto";
import { DiscardPolicy, jetstreamManager } from "@nats-io/jetstream";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { ownNats, testCertificate, type OwnNats } from "@ledger/testing";
import pino from "pino";
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from "vitest";
import { ConfigError, readInfraConfig } from "./config.js";
import { createLogger } from "./logger.js";
import type { Installation } from "./db.js";
import { connectNats, ensureEventStream, natsConnectionOptions, StreamOfAnotherInstallation } from "./nats.js";

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
    expect(natsConnectionOptions(readInfraConfig({}))).toEqual({ servers: ["nats://127.0.0.1:4222"] });
    // A cluster's servers, comma-separated, each a URL of its own.
    expect(natsConnectionOptions(readInfraConfig({ NATS_URL: "nats://a:4222, nats://b:4222" }))).toEqual({
      servers: ["nats://a:4222", "nats://b:4222"],
    });
    expect(() => readInfraConfig({ NATS_URL: "nats://a:4222,http://b" })).toThrow(/NATS_URL must use/);
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

// The event stream is one installation's: it names, per service, the database whose events it
// carries, and a process of another installation (other databases, same NATS_STREAM) is refused.
describe("the event stream's installation", () => {
  let nc: NatsConnection;
  const streams: string[] = [];
  const logged: Array<{ msg: string; schema?: string }> = [];
  const log = pino({ level: "info" }, { write: (line: string) => void logged.push(JSON.parse(line)) });
  beforeAll(async () => {
    nc = await connect({ servers: inject("natsUrl") });
  });
  afterEach(async () => {
    const jsm = await jetstreamManager(nc);
    for (const stream of streams.splice(0)) await jsm.streams.delete(stream).catch(() => {});
    logged.length = 0;
  });
  afterAll(async () => nc?.close());

  function newStream() {
    const tag = randomBytes(4).toString("hex");
    const name = `${inject("natsStreamPrefix")}OWNED_${tag}`;
    streams.push(name);
    return { name, subjectPrefix: `owned${tag}` };
  }
  const installation = (schema: string, database = "ledger_a at 10.0.0.1:5432"): Installation => ({ schema, id: randomUUID(), database });
  const description = async (stream: string) => (await (await jetstreamManager(nc)).streams.info(stream)).config.description;

  it("is made naming the caller's database, and used again by the same database (a replica, a restart)", async () => {
    const stream = newStream();
    const ledger = installation("ledger");
    await ensureEventStream(nc, stream, [ledger], log, { applyLimits: true });
    expect(await description(stream.name)).toContain(`ledger=${ledger.id} (ledger_a at 10.0.0.1:5432)`);
    await ensureEventStream(nc, stream, [ledger], log, { applyLimits: true });
    await ensureEventStream(nc, stream, [{ ...ledger }], log, { applyLimits: true });
  });

  it("refuses another database's process for the same service, saying which stream, whose it is and what to set", async () => {
    const stream = newStream();
    const ours = installation("notification", "ledger at 10.0.0.1:5432");
    await ensureEventStream(nc, stream, [ours], log, { applyLimits: true });
    const theirs = installation("notification", "ledger at 10.0.0.2:5432");
    const refusal = await ensureEventStream(nc, stream, [theirs], log, { applyLimits: true }).then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(refusal).toBeInstanceOf(StreamOfAnotherInstallation);
    const message = (refusal as Error).message;
    expect(message).toContain(`NATS stream ${stream.name} belongs to another installation`);
    expect(message).toContain(`installation ${ours.id} (database ledger at 10.0.0.1:5432)`);
    expect(message).toContain(`this notification database is installation ${theirs.id} (database ledger at 10.0.0.2:5432)`);
    expect(message).toMatch(/set NATS_STREAM and NATS_SUBJECT_PREFIX/);
    // The stream still names the first.
    expect(await description(stream.name)).toContain(`notification=${ours.id}`);
  });

  it("adds the other services of the installation as they first use it, and refuses another installation's each", async () => {
    const stream = newStream();
    const [ledger, hold, notification] = [installation("ledger"), installation("hold"), installation("notification")];
    await ensureEventStream(nc, stream, [ledger], log, { applyLimits: true });
    await ensureEventStream(nc, stream, [hold], log, { applyLimits: true });
    await ensureEventStream(nc, stream, [notification], log, { applyLimits: true });
    const named = await description(stream.name);
    for (const owner of [ledger, hold, notification]) expect(named).toContain(`${owner.schema}=${owner.id}`);
    // The migration Job checks all three at once.
    await ensureEventStream(nc, stream, [ledger, hold, notification], log, { applyLimits: true });
    await expect(ensureEventStream(nc, stream, [ledger, installation("hold"), notification], log, { applyLimits: true })).rejects.toThrow(
      /its hold events are those of installation/,
    );
  });

  it("adopts a stream an earlier version made, naming no installation, and logs it", async () => {
    const stream = newStream();
    const jsm = await jetstreamManager(nc);
    await jsm.streams.add({ name: stream.name, subjects: [`${stream.subjectPrefix}.events.>`] });
    const notification = installation("notification");
    await ensureEventStream(nc, stream, [notification], log, { applyLimits: true });
    expect(await description(stream.name)).toContain(`notification=${notification.id}`);
    expect(logged).toContainEqual(
      expect.objectContaining({
        schema: "notification",
        msg: "the event stream named no installation for notification events; it now names this database's",
      }),
    );
    await expect(ensureEventStream(nc, stream, [installation("notification")], log, { applyLimits: true })).rejects.toThrow(
      StreamOfAnotherInstallation,
    );
  });

  it("lets only one of two installations that make it at once have it", async () => {
    const stream = newStream();
    const results = await Promise.allSettled(
      [installation("ledger"), installation("ledger")].map((o) => ensureEventStream(nc, stream, [o], log, { applyLimits: true })),
    );
    expect(results.map((r) => r.status).sort()).toEqual(["fulfilled", "rejected"]);
  });

  it("is made with the configured limits, refusing new events when full; a start brings an existing one to them, a relay's check does not", async () => {
    const stream = newStream();
    const ledger = installation("ledger");
    const limits = { replicas: 1, maxBytes: 1024 * 1024, maxAgeHours: 24 };
    await ensureEventStream(nc, { ...stream, limits }, [ledger], log, { applyLimits: false });
    const jsm = await jetstreamManager(nc);
    const made = (await jsm.streams.info(stream.name)).config;
    expect(made).toMatchObject({ max_bytes: 1024 * 1024, discard: DiscardPolicy.New, num_replicas: 1, max_age: 24 * 3600 * 1e9 });

    // An operator raised the limit by hand: the relays' and the consumer's checks leave it.
    await jsm.streams.update(stream.name, { ...made, max_bytes: 4 * 1024 * 1024 });
    await ensureEventStream(nc, { ...stream, limits }, [ledger], log, { applyLimits: false });
    expect((await jsm.streams.info(stream.name)).config.max_bytes).toBe(4 * 1024 * 1024);

    // A start (or the migration Job) with other settings brings the stream to them.
    await ensureEventStream(nc, { ...stream, limits: { ...limits, maxBytes: 2 * 1024 * 1024, maxAgeHours: 48 } }, [ledger], log, {
      applyLimits: true,
    });
    expect((await jsm.streams.info(stream.name)).config).toMatchObject({ max_bytes: 2 * 1024 * 1024, max_age: 48 * 3600 * 1e9 });
    expect(logged).toContainEqual(expect.objectContaining({ msg: "brought the event stream's limits to the configured ones" }));
  });

  it("reads its limits from NATS_STREAM_REPLICAS, NATS_STREAM_MAX_BYTES and NATS_STREAM_MAX_AGE_HOURS", () => {
    expect(readInfraConfig({}).natsStreamLimits).toEqual({ replicas: 1, maxBytes: 1024 ** 3, maxAgeHours: 168 });
    expect(
      readInfraConfig({ NATS_STREAM_REPLICAS: "3", NATS_STREAM_MAX_BYTES: "8589934592", NATS_STREAM_MAX_AGE_HOURS: "24" }).natsStreamLimits,
    ).toEqual({
      replicas: 3,
      maxBytes: 8589934592,
      maxAgeHours: 24,
    });
    expect(() => readInfraConfig({ NATS_STREAM_REPLICAS: "7" })).toThrow(ConfigError);
    expect(() => readInfraConfig({ NATS_STREAM_MAX_BYTES: "10" })).toThrow(ConfigError);
  });
});
