// `pnpm start`: every service and the gateway in one process, in the foreground, each on its own
// port, talking over loopback exactly as they do when deployed apart. Topology is configuration.
import { runMain } from "@ledger/common";
import { readGatewayConfig, startGateway } from "@ledger/gateway";
import { readHoldConfig, startHold } from "@ledger/hold-service";
import { readLedgerConfig, startLedger } from "@ledger/ledger-service";
import { readNotificationConfig, startNotification } from "@ledger/notification-service";
import { ensureLocalNats } from "./local-nats.js";

runMain("ledger-all", async () => {
  const stopNats = await ensureLocalNats(process.env["NATS_URL"] ?? "nats://127.0.0.1:4222", process.env["LEDGER_DATA_DIR"] ?? ".data");
  const ledger = await startLedger(readLedgerConfig());
  const ledgerUrl = process.env["LEDGER_URL"] ?? ledger.server.url;
  const hold = await startHold({ ...readHoldConfig(), ledgerUrl });
  const notification = await startNotification({ ...readNotificationConfig(), ledgerUrl });
  const gateway = await startGateway({
    ...readGatewayConfig(),
    ledgerUrl,
    holdUrl: process.env["HOLD_URL"] ?? hold.server.url,
    notificationUrl: process.env["NOTIFICATION_URL"] ?? notification.server.url,
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
    },
  };
});
