import { existsSync } from "node:fs";
import type { TestProject } from "vitest/node";
import postgres from "postgres";

declare module "vitest" {
  export interface ProvidedContext {
    databaseUrl: string;
    natsUrl: string;
    /**
     * What every JetStream stream a test makes on the run's NATS is named after (`TEST_<run>_`), so
     * the run's teardown (e2e/src/run-streams.ts) removes what this run left and nothing of another's.
     */
    natsStreamPrefix: string;
  }
}

const HOW_TO =
  "Tests need a real PostgreSQL and a real NATS server with JetStream. Set DATABASE_URL " +
  "(for example postgres://root@127.0.0.1:5432/ledger_test) and NATS_URL (for example nats://127.0.0.1:4222), " +
  "or run where a Docker engine is reachable so testcontainers can start both.";

function dockerAvailable(): boolean {
  return existsSync("/var/run/docker.sock") || Boolean(process.env["DOCKER_HOST"]);
}

/**
 * Finds Postgres and NATS for the run: from DATABASE_URL and NATS_URL, else from testcontainers
 * where Docker exists, else stops with a message that says what to set. Each run gets a database
 * of its own, dropped at the end, so runs never see each other's rows; likewise a prefix for its
 * JetStream streams.
 */
export default async function setup(project: TestProject) {
  let databaseUrl = process.env["DATABASE_URL"];
  let natsUrl = process.env["NATS_URL"];
  const stops: Array<() => Promise<unknown>> = [];

  if ((!databaseUrl || !natsUrl) && dockerAvailable()) {
    const { GenericContainer, Wait } = await import("testcontainers");
    if (!databaseUrl) {
      const pg = await new GenericContainer("postgres:16-alpine")
        .withEnvironment({ POSTGRES_PASSWORD: "test", POSTGRES_USER: "root" })
        .withExposedPorts(5432)
        .withWaitStrategy(Wait.forLogMessage(/database system is ready to accept connections/, 2))
        .start();
      stops.push(() => pg.stop());
      databaseUrl = `postgres://root:test@${pg.getHost()}:${pg.getMappedPort(5432)}/ledger_test`;
    }
    if (!natsUrl) {
      const nats = await new GenericContainer("nats:2.10-alpine").withCommand(["-js"]).withExposedPorts(4222).start();
      stops.push(() => nats.stop());
      natsUrl = `nats://${nats.getHost()}:${nats.getMappedPort(4222)}`;
    }
  }
  if (!databaseUrl || !natsUrl) throw new Error(HOW_TO);

  const run = `${Date.now().toString(36)}_${process.pid}`;
  const base = new URL(databaseUrl);
  const runDatabase = `${base.pathname.replace(/^\//, "") || "ledger_test"}_${run}`;
  const runUrl = new URL(databaseUrl);
  runUrl.pathname = `/${runDatabase}`;
  const admin = new URL(databaseUrl);
  admin.pathname = "/postgres";
  const sql = postgres(admin.toString(), { max: 1, onnotice: () => {} });
  try {
    await sql.unsafe(`create database "${runDatabase}"`);
  } catch (err) {
    throw new Error(`cannot create the test database on ${admin.host}: ${(err as Error).message}\n${HOW_TO}`);
  }

  project.provide("databaseUrl", runUrl.toString());
  project.provide("natsUrl", natsUrl);
  project.provide("natsStreamPrefix", `TEST_${run}_`);

  return async () => {
    // Stacks may make databases of their own named after the run's (startStack's notification
    // database); a test that died before closing its stack must not leave one behind.
    const extra = await sql<{ datname: string }[]>`select datname from pg_database where starts_with(datname, ${runDatabase + "_"})`.catch(
      () => [],
    );
    for (const { datname } of extra)
      await sql.unsafe(`drop database if exists "${datname.replace(/"/g, '""')}" with (force)`).catch(() => {});
    await sql.unsafe(`drop database if exists "${runDatabase}" with (force)`).catch(() => {});
    await sql.end({ timeout: 2 });
    for (const stop of stops) await stop();
  };
}
