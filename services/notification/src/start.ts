import { fileURLToPath } from "node:url";
import {
  cachedAuthenticator,
  ledgerAuthenticator,
  startService,
  streamSettingsOf,
  type InProcessService,
  type ServiceHandle,
} from "@ledger/common";
import type { NotificationConfig } from "./config.js";
import { createEventConsumer } from "./consumer.js";
import { checkSecretKey } from "./endpoints.js";
import routes from "./routes.js";
import { createWorker } from "./worker.js";

const MIGRATIONS = fileURLToPath(new URL("../migrations", import.meta.url));

/** `User-Agent` of deliveries (docs/webhooks.md#a-delivery). */
export const USER_AGENT = "ledger-webhooks/0.1.0";

/** A running notification service. */
export interface NotificationHandle extends ServiceHandle {
  /** Looks for due deliveries now (tests and resends use it; workers also poll). */
  wake(): void;
}

/**
 * Starts the notification service: what every service has (startService), the delivery workers,
 * the JetStream consumer and its RPC handlers. It does not wait for NATS: events are read once it
 * is there. API keys are checked by the ledger at `config.ledgerUrl`, or in memory when
 * `peers.ledger` runs in this process.
 */
export function startNotification(config: NotificationConfig, peers: { ledger?: InProcessService } = {}): Promise<NotificationHandle> {
  return startService({
    name: "notification",
    config,
    migrationsDir: MIGRATIONS,
    async parts({ sql, log, tracing, nats, lifecycle }) {
      await checkSecretKey(sql, config.secretKey);
      // Closed in reverse: the consumer stops before the workers finish their attempts in flight.
      const worker = lifecycle.run(
        "delivery worker",
        createWorker({
          sql,
          log,
          secretKey: config.secretKey,
          timeoutMs: config.webhookTimeoutMs,
          retryScheduleMs: config.webhookRetryScheduleMs,
          concurrency: config.webhookConcurrency,
          allowPrivateNetworks: config.webhookAllowPrivateNetworks,
          userAgent: USER_AGENT,
          tracing,
          ...(config.webhookExtraCa ? { extraCa: config.webhookExtraCa } : {}),
          ...(config.webhookContendedPauseMs ? { contendedPauseMs: config.webhookContendedPauseMs } : {}),
        }),
      );
      lifecycle.run(
        "event consumer",
        createEventConsumer({
          sql,
          nats,
          stream: streamSettingsOf(config),
          log,
          onIngested: () => worker.wake(),
          tracing,
        }),
      );
      const wake = () => worker.wake();
      return {
        routes: routes({
          sql,
          secretKey: config.secretKey,
          urlPolicy: { allowHttp: config.webhookAllowHttp, allowPrivateNetworks: config.webhookAllowPrivateNetworks },
          wake,
        }),
        auth: { authenticate: cachedAuthenticator(ledgerAuthenticator(peers.ledger ?? config.ledgerUrl, config.serviceToken)) },
        extra: { wake },
      };
    },
  });
}
