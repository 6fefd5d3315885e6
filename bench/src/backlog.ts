// Work the system still owes after the requests were answered: outbox events not yet on JetStream,
// and stream messages the notification consumer has not yet stored.
import { jetstreamManager, type JetStreamManager } from "@nats-io/jetstream";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import type postgres from "postgres";

export interface Backlog {
  /** Events in the ledger's and the hold service's outboxes. */
  outbox: number;
  /** Messages the notification consumer has not acknowledged yet. */
  consumer: number;
}

/** Reads the backlog of one bench installation. */
export interface BacklogProbe {
  read(): Promise<Backlog>;
  /** Events in the notification service's event log so far. */
  storedEvents(): Promise<number>;
  /** Deliveries not yet ended (pending, leased or waiting for a retry). */
  pendingDeliveries(): Promise<number>;
  /** Waits until both are empty, at most `capMs`; answers how long it waited and what was left. */
  settle(capMs: number): Promise<{ waitedMs: number; left: Backlog }>;
  natsVersion(): string;
  close(): Promise<void>;
}

export async function backlogProbe(sql: postgres.Sql, natsUrl: string, stream: string): Promise<BacklogProbe> {
  const nc: NatsConnection = await connect({ servers: natsUrl });
  const jsm: JetStreamManager = await jetstreamManager(nc);
  const read = async (): Promise<Backlog> => {
    const [rows] = await sql<{ n: number }[]>`
      select ((select coalesce(sum(events), 0) from ledger.outbox_writes) + (select coalesce(sum(events), 0) from hold.outbox_writes))::int as n`;
    const info = await jsm.consumers.info(stream, `notification_${stream}`).catch(() => undefined);
    return { outbox: rows?.n ?? 0, consumer: info ? info.num_pending + info.num_ack_pending : 0 };
  };
  return {
    read,
    async storedEvents() {
      const [row] = await sql<{ n: number }[]>`select count(*)::int as n from notification.events`;
      return row?.n ?? 0;
    },
    async pendingDeliveries() {
      const [row] = await sql<{ n: number }[]>`select count(*)::int as n from notification.deliveries where status = 'pending'`;
      return row?.n ?? 0;
    },
    async settle(capMs) {
      const start = Date.now();
      let left = await read();
      while ((left.outbox > 0 || left.consumer > 0) && Date.now() - start < capMs) {
        await new Promise((resolve) => setTimeout(resolve, 100));
        left = await read();
      }
      return { waitedMs: Date.now() - start, left };
    },
    natsVersion: () => nc.info?.version ?? "unknown",
    async close() {
      // The stream was the run's own: remove it so repeated runs do not fill the NATS store.
      await jsm.streams.delete(stream).catch(() => {});
      await nc.close();
    },
  };
}

/**
 * Removes a run's stream. Each reserves its whole size (NATS_STREAM_MAX_BYTES, 16 GiB in the bench)
 * in the NATS store, so a run that dies before its probe removes it would leave the next runs with
 * "insufficient storage resources".
 */
export async function deleteStream(natsUrl: string, stream: string): Promise<void> {
  const nc = await connect({ servers: natsUrl });
  try {
    const jsm = await jetstreamManager(nc);
    await jsm.streams.delete(stream).catch(() => {});
  } finally {
    await nc.close();
  }
}
