import { fromBinary } from "@bufbuild/protobuf";
import { jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { EventSchema, type Event } from "@ledger/proto/events/v1/events_pb.js";

/** A message read back from the stream: its `Nats-Msg-Id` and the decoded event. */
export interface StoredEvent {
  msgId: string;
  subject: string;
  event: Event;
}

/** Reads every message of a stream, in order. */
export async function readStream(natsUrl: string, stream: string): Promise<StoredEvent[]> {
  const nc = await connect({ servers: natsUrl });
  try {
    const jsm = await jetstreamManager(nc);
    const info = await jsm.streams.info(stream);
    const out: StoredEvent[] = [];
    // A sequence with no message was deleted; any other failure (a timeout on a busy machine) is
    // asked again, and never taken for a missing event.
    const getMessage = async (seq: number) => {
      for (let attempt = 1; ; attempt++) {
        try {
          return await jsm.streams.getMessage(stream, { seq });
        } catch (err) {
          if (/no message found/i.test(String((err as Error).message))) return null;
          if (attempt === 5) throw err;
        }
      }
    };
    for (let seq = info.state.first_seq; seq <= info.state.last_seq && info.state.messages > 0; seq++) {
      const msg = await getMessage(seq);
      if (!msg) continue;
      out.push({ msgId: msg.header?.get("Nats-Msg-Id") ?? "", subject: msg.subject, event: fromBinary(EventSchema, msg.data) });
    }
    return out;
  } finally {
    await nc.close();
  }
}

/** Every test run's streams start with this; a sweep never touches a stream named otherwise. */
const TEST_STREAM_PREFIX = /^TEST_[A-Za-z0-9_-]+_$/;

/**
 * Deletes every stream whose name starts with `prefix` (a test run's, `TEST_<run>_`, or a part of
 * it), with their consumers; resolves to the names deleted. Other runs' streams, and anything not
 * named as a test's, are left alone.
 */
export async function deleteStreamsStartingWith(natsUrl: string, prefix: string): Promise<string[]> {
  if (!TEST_STREAM_PREFIX.test(prefix))
    throw new Error(`refusing to delete streams by the prefix ${JSON.stringify(prefix)}: not a test run's`);
  const nc = await connect({ servers: natsUrl, reconnect: false, timeout: 2_000 });
  try {
    const jsm = await jetstreamManager(nc);
    // Listed first, deleted after: the listing pages by offset, and deleting under it would skip some.
    const matching: string[] = [];
    for await (const name of jsm.streams.names()) if (name.startsWith(prefix)) matching.push(name);
    const deleted: string[] = [];
    for (const name of matching) if (await jsm.streams.delete(name).catch(() => false)) deleted.push(name);
    return deleted.sort();
  } finally {
    await nc.close();
  }
}

/**
 * Deletes a stream a test made, and its consumers with it, so runs against a shared NATS leave
 * nothing behind. A stream already gone, or a NATS that went away, is left as it is.
 */
export async function deleteStream(natsUrl: string, stream: string): Promise<void> {
  const nc = await connect({ servers: natsUrl, reconnect: false, timeout: 2_000 }).catch(() => undefined);
  if (!nc) return;
  try {
    await (await jetstreamManager(nc)).streams.delete(stream).catch(() => false);
  } finally {
    await nc.close();
  }
}
