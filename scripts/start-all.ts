// `npm start`: every service and the gateway in one process, in the foreground. Each service still
// listens on its own RPC port (for the CLI, other internal callers and probes), but the gateway and
// the services call each other in memory, through the called service's own router and interceptors:
// the same code as when deployed apart, without loopback sockets and HTTP/2 inside one process.
// Topology is configuration: LEDGER_INTERNAL_CALLS=http sends those calls over loopback HTTP/2
// instead, and LEDGER_URL, HOLD_URL or NOTIFICATION_URL send them to a service elsewhere.
// On a laptop without servers it brings its own: an embedded PostgreSQL (PGlite) and a local
// nats-server, each with its data under LEDGER_DATA_DIR (default .data).
import { createLifecycle, createLogger, runMain, type RunningServer } from "@ledger/common";
import { readGatewayConfig, startGateway } from "@ledger/gateway";
import { readHoldConfig, startHold } from "@ledger/hold-service";
import { readLedgerConfig, startLedger } from "@ledger/ledger-service";
import { readNotificationConfig, startNotification } from "@ledger/notification-service";
import { chooseDatabase } from "./embedded-postgres.js";
import { ensureLocalNats } from "./local-nats.js";

async function startAll() {
  const dataRoot = process.env["LEDGER_DATA_DIR"] ?? ".data";
  // Each service closes its own parts; this closes the services, last started first, then what
  // they ran on. A start that fails half-way closes what it had started, the embedded database
  // included, so its data is flushed.
  const lifecycle = createLifecycle("ledger-all", createLogger("ledger-all", process.env["LOG_LEVEL"] ?? "info"));
  const database = await chooseDatabase(process.env, dataRoot);
  // Closed last: the services have ended their pools, and PGlite flushes and checkpoints its data.
  if (database.embedded) lifecycle.onClose("embedded PostgreSQL", () => database.close());
  return lifecycle.starting(async () => {
    // The services read DATABASE_URL (or their own variable) like everywhere else; on the embedded
    // database it is the loopback address this process serves it on.
    const env: Record<string, string | undefined> = { ...process.env, DATABASE_URL: database.url };
    const stopNats = await ensureLocalNats(env["NATS_URL"] ?? "nats://127.0.0.1:4222", dataRoot);
    if (stopNats) lifecycle.onClose("local nats-server", stopNats);
    const internalCalls = env["LEDGER_INTERNAL_CALLS"] ?? "memory";
    if (internalCalls !== "memory" && internalCalls !== "http")
      throw new Error(`LEDGER_INTERNAL_CALLS must be memory or http, not ${JSON.stringify(internalCalls)}`);
    // A service named by its *_URL variable is called there; one of this process, in memory
    // (or at its loopback port with LEDGER_INTERNAL_CALLS=http).
    const local = (variable: string, server: RunningServer) =>
      env[variable] === undefined && internalCalls === "memory" ? server.inProcess : undefined;
    const ledger = await startLedger(readLedgerConfig(env));
    lifecycle.onClose("ledger", () => ledger.close());
    const ledgerUrl = env["LEDGER_URL"] ?? ledger.server.url;
    const ledgerPeer = local("LEDGER_URL", ledger.server);
    const hold = await startHold({ ...readHoldConfig(env), ledgerUrl }, { ledger: ledgerPeer });
    lifecycle.onClose("hold", () => hold.close());
    const notification = await startNotification({ ...readNotificationConfig(env), ledgerUrl }, { ledger: ledgerPeer });
    lifecycle.onClose("notification", () => notification.close());
    const peers = {
      ledger: ledgerPeer,
      hold: local("HOLD_URL", hold.server),
      notification: local("NOTIFICATION_URL", notification.server),
    };
    const gateway = await startGateway(
      {
        ...readGatewayConfig(env),
        ledgerUrl,
        holdUrl: env["HOLD_URL"] ?? hold.server.url,
        notificationUrl: env["NOTIFICATION_URL"] ?? notification.server.url,
      },
      peers,
    );
    lifecycle.onClose("gateway", () => gateway.close());
    console.error(
      `\nLedger is up. REST API: http://127.0.0.1:${gateway.server.port}/v1  ` +
        `(RPC: ledger ${ledger.server.url}, hold ${hold.server.url}, notification ${notification.server.url}; ` +
        `internal calls ${peers.ledger && peers.hold && peers.notification ? "in memory" : "over HTTP/2"}; ` +
        `gateway metrics ${gateway.ops.url}/metrics)\n`,
    );
    return { close: () => lifecycle.close() };
  });
}

runMain("ledger-all", startAll);
