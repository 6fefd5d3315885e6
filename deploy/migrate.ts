/**
 * The migration Job's entry point: applies every service's migrations and makes sure the event
 * stream exists with the replica count the cluster wants, then exits.
 *
 * The services migrate at start as well (under an advisory lock, so this is never a race), but a
 * Job that runs first means a bad migration fails one Job, visibly, instead of crash-looping every
 * replica of a rolling update. It lives under deploy/ because only Kubernetes needs it.
 *
 * The stream matters as much: it is made (or brought to its limits) from the same NATS_STREAM_*
 * settings every service reads, so the Job, running first, gives it its replicas before any
 * service publishes (docs/operations.md#sizing-the-event-stream).
 * It is checked to be this installation's too: one whose events belong to other databases fails
 * the Job (docs/operations.md#one-stream-per-installation).
 */
import { readdirSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { connect } from "@nats-io/transport-node";
import postgres from "postgres";
import {
  createLogger,
  ensureEventStream,
  envInt,
  installationOf,
  type Installation,
  natsConnectionOptions,
  openDatabase,
  readDatabaseUrl,
  readInfraConfig,
  streamSettingsOf,
} from "@ledger/common";

const env = process.env;
const log = createLogger("migrate", env["LOG_LEVEL"] ?? "info");

/** Each service's schema, its own database variable and its migrations, as its start.ts has them. */
const SERVICES = [
  { schema: "ledger", variable: "LEDGER_DATABASE_URL", dir: "../services/ledger/migrations" },
  { schema: "hold", variable: "HOLD_DATABASE_URL", dir: "../services/hold/migrations" },
  { schema: "notification", variable: "NOTIFICATION_DATABASE_URL", dir: "../services/notification/migrations" },
] as const;

/** The highest migration version among `dir`'s files (0001_init.sql is 1). */
function newestMigration(dir: string): number {
  const versions = readdirSync(fileURLToPath(new URL(dir, import.meta.url)))
    .filter((f) => /^\d{4}_[\w-]+\.sql$/.test(f))
    .map((f) => Number(f.slice(0, 4)));
  return Math.max(0, ...versions);
}

/**
 * `--wait <schema>`: an init container's check, before a service's new pods start, that the
 * migrations this image carries for `schema` are applied: by the migration Job of the same image,
 * which may still be running. Waits up to MIGRATE_WAIT_SECONDS (600) and exits 0 once they are,
 * 1 if they are not by then (Kubernetes restarts the init container, so the rollout waits on).
 * It only reads, so it needs no lock and applies nothing.
 */
async function waitForMigrations(schema: string): Promise<void> {
  const service = SERVICES.find((s) => s.schema === schema);
  if (!service) throw new Error(`--wait takes one of ${SERVICES.map((s) => s.schema).join(", ")}, not ${JSON.stringify(schema)}`);
  const wanted = newestMigration(service.dir);
  const deadline = Date.now() + envInt(env, "MIGRATE_WAIT_SECONDS", 600, 1, 86_400) * 1000;
  const sql = postgres(readDatabaseUrl(env, service.variable), {
    max: 1,
    onnotice: () => {},
    connection: { application_name: `migrate-wait-${schema}` },
  });
  try {
    let applied = 0;
    for (;;) {
      applied = await sql
        .unsafe<{ v: number }[]>(`select coalesce(max(version), 0)::int as v from "${schema}".schema_migrations`)
        .then((rows) => rows[0]?.v ?? 0)
        // No migrations table yet (a new database), or the database not answering yet: not applied.
        .catch(() => 0);
      if (applied >= wanted) break;
      if (Date.now() > deadline)
        throw new Error(`${schema}: migration ${wanted} is not applied (the database has ${applied}); is the migration Job running?`);
      await new Promise((resolve) => setTimeout(resolve, 2_000));
    }
    log.info({ schema, migration: applied }, "migrations of this image are applied");
  } finally {
    await sql.end({ timeout: 5 });
  }
}

async function main(): Promise<void> {
  const wait = process.argv.indexOf("--wait");
  if (wait !== -1) return waitForMigrations(process.argv[wait + 1] ?? "");
  // Each service's database and its installation id, which the stream records as the owner of its events.
  const installations: Installation[] = [];
  for (const service of SERVICES) {
    const sql = await openDatabase({
      url: readDatabaseUrl(env, service.variable),
      schema: service.schema,
      migrationsDir: fileURLToPath(new URL(service.dir, import.meta.url)),
      max: 1,
      log,
      applicationName: `migrate-${service.schema}`,
    });
    installations.push(await installationOf(sql));
    await sql.end({ timeout: 5 });
    log.info({ schema: service.schema }, "migrations applied");
  }

  const infra = readInfraConfig(env);
  const nc = await connect({ ...natsConnectionOptions(infra), timeout: 10_000 });
  try {
    // Created, or brought to the configured limits (replicas raised, never lowered: JetStream moves a
    // stream from R1 to R3 online), as every service does; another installation's stream fails the
    // Job, with the message saying what to set.
    await ensureEventStream(nc, streamSettingsOf(infra), installations, log, { applyLimits: true });
  } finally {
    await nc.drain();
  }
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    console.error(`migrate: ${err instanceof Error ? err.message : String(err)}`);
    process.exit(1);
  },
);
