// `pnpm start`: every service and the gateway in one process, in the foreground, each on its own
// port, talking over loopback exactly as they do when deployed apart. Topology is configuration.
import { runMain } from "@ledger/common";
import { readGatewayConfig, startGateway } from "@ledger/gateway";
import { readLedgerConfig, startLedger } from "@ledger/ledger-service";
import { readNotificationConfig, startNotification } from "@ledger/notification-service";

runMain("ledger-all", async () => {
  const ledgerConfig = readLedgerConfig();
  const ledger = await startLedger(ledgerConfig);
  const notification = await startNotification({ ...readNotificationConfig(), ledgerUrl: process.env["LEDGER_URL"] ?? ledger.server.url });
  const gateway = await startGateway({
    ...readGatewayConfig(),
    ledgerUrl: process.env["LEDGER_URL"] ?? ledger.server.url,
    notificationUrl: process.env["NOTIFICATION_URL"] ?? notification.server.url,
  });
  console.error(`\nLedger is up. REST API: http://127.0.0.1:${gateway.server.port}/v1  (RPC: ${ledger.server.url})\n`);
  return {
    async close() {
      await gateway.close();
      await notification.close();
      await ledger.close();
    },
  };
});
