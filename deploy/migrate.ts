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
import { fileURLToPath } from "node:url";
import { connect } from "@nats-io/transport-node";
import {
  createLogger,
  ensureEventStream,
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

async function main(): Promise<void> {
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
