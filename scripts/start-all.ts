// `pnpm start`: every service and the gateway in one process, in the foreground, each on its own
// port, talking over loopback exactly as they do when deployed apart. Topology is configuration.
// On a laptop without servers it brings its own: an embedded PostgreSQL (PGlite) and a local
// nats-server, each with its data under LEDGER_DATA_DIR (default .data).
import { runMain } from "@ledger/common";
import { readGatewayConfig, startGateway } from "@ledger/gateway";
import { readHoldConfig, startHold } from "@ledger/hold-service";
import { readLedgerConfig, startLedger } from "@ledger/ledger-service";
import { readNotificationConfig, startNotification } from "@ledger/notification-service";
import { chooseDatabase } from "./embedded-postgres.js";
import { ensureLocalNats } from "./local-nats.js";

runMain("ledger-all", async () => {
  const dataRoot = process.env["LEDGER_DATA_DIR"] ?? ".data";
  const database = await chooseDatabase(process.env, dataRoot);
  // The services read DATABASE_URL (or their own variable) like everywhere else; on the embedded
  // database it is the loopback address this process serves it on.
  const env: Record<string, string | undefined> = { ...process.env, DATABASE_URL: database.url };
  const stopDatabase = async () => {
    if (database.embedded) await database.close();
  };
  let stopNats: (() => void) | undefined;
  try {
    stopNats = await ensureLocalNats(env["NATS_URL"] ?? "nats://127.0.0.1:4222", dataRoot);
    const ledger = await startLedger(readLedgerConfig(env));
    const ledgerUrl = env["LEDGER_URL"] ?? ledger.server.url;
    const hold = await startHold({ ...readHoldConfig(env), ledgerUrl });
    const notification = await startNotification({ ...readNotificationConfig(env), ledgerUrl });
    const gateway = await startGateway({
      ...readGatewayConfig(env),
      ledgerUrl,
      holdUrl: env["HOLD_URL"] ?? hold.server.url,
      notificationUrl: env["NOTIFICATION_URL"] ?? notification.server.url,
    });
    console.error(
      `\nLedger is up. REST API: http://127.0.0.1:${gateway.server.port}/v1  ` +
        `(RPC: ledger ${ledger.server.url}, hold ${hold.server.url}, notification ${notification.server.url})\n`,
    );
    return {
      async close() {
        await gateway.close();
        await notification.close();
        await hold.close();
        await ledger.close();
        stopNats?.();
        // Last: the services have ended their pools, and PGlite flushes and checkpoints its data.
        await stopDatabase();
      },
    };
  } catch (err) {
    // A start that fails half-way still closes the embedded database cleanly.
    stopNats?.();
    await stopDatabase();
    throw err;
  }
});
