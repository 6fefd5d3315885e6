import { create } from "@bufbuild/protobuf";
import { timestampNow } from "@bufbuild/protobuf/wkt";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connectNats, createLogger, createOutbox, newId, type Outbox } from "@ledger/common";
import { EventSchema } from "@ledger/proto/events/v1/events_pb.js";
import { readStream, startStack, type Stack } from "@ledger/e2e";

// Events keep pace with commits: a burst of committed outbox rows, relayed by the ledger and by a
// second relay side by side, reaches JetStream once per event id and the event log once per event.
// Timing is logged, never asserted (the machine is shared); what it showed is in
// docs/decisions/relay-batched-publish.md.

let stack: Stack;
let extra: Outbox | undefined;
const BURST = 20_000;

beforeAll(async () => {
  stack = await startStack({ notification: {} });
});
afterAll(async () => {
  await extra?.stop();
  await stack?.close();
});

describe("a burst of events", () => {
  it("is published exactly once and stored in the event log", async () => {
    const log = createLogger("test-relay", "silent");
    const nats = connectNats({ natsUrl: stack.natsUrl }, "test-relay", log);
    extra = createOutbox({
      service: "test-relay",
      sql: stack.sql as never,
      nats,
      stream: { name: stack.stream, subjectPrefix: stack.subjectPrefix },
      log,
      // The ledger's outbox table, whose rows are keyed by account like the ledger's own relay's.
      rowsByAccount: true,
    });
    const events = Array.from({ length: BURST }, (_, i) =>
      create(EventSchema, {
        id: newId("event"),
        type: "transaction.created",
        accountId: stack.account.account_id,
        programId: "prg_burst",
        created: timestampNow(),
        data: {
          case: "transaction",
          value: { transactionGroupId: `grp_burst${i}`, amount: BigInt(i + 1), currencyCode: "USD", status: "posted" },
        },
      }),
    );
    const started = Date.now();
    // Committed in transactions of 500 events, as rows of 100 as batch calls write them, while both relays run.
    extra.start();
    for (let i = 0; i < events.length; i += 500) {
      await stack.sql.begin(async (tx) => {
        for (let j = i; j < i + 500; j += 100) await extra!.enqueue(tx as never, events.slice(j, j + 100));
      });
    }
    const insertedMs = Date.now() - started;
    const published = expect
      .poll(async () => (await stack.sql<{ n: number }[]>`select count(*)::int as n from outbox_writes`)[0]!.n, {
        timeout: 60_000,
        interval: 20,
      })
      .toBe(0)
      .then(() => Date.now() - started);
    const stored = expect
      .poll(
        async () =>
          (
            await stack.notificationSql!<
              { n: number }[]
            >`select count(*)::int as n from events where account_id = ${stack.account.account_id}`
          )[0]!.n,
        { timeout: 60_000, interval: 50 },
      )
      .toBe(BURST);
    const [publishedMs] = await Promise.all([published, stored]);
    console.log(
      `${BURST} events: committed after ${insertedMs} ms, on JetStream after ${publishedMs} ms, in the event log after ${Date.now() - started} ms`,
    );
    const [left] = await stack.sql<{ n: number }[]>`select count(*)::int as n from outbox_writes`;
    expect(left!.n).toBe(0);

    const onStream = (await readStream(stack.natsUrl, stack.stream)).filter((s) => s.event.accountId === stack.account.account_id);
    expect(onStream).toHaveLength(BURST);
    expect(new Set(onStream.map((s) => s.msgId)).size).toBe(BURST);
    for (const s of onStream) expect(s.msgId).toBe(s.event.id);
    const ids = await stack.notificationSql!<{ id: string }[]>`select id from events where account_id = ${stack.account.account_id}`;
    expect(new Set(ids.map((r) => r.id))).toEqual(new Set(events.map((e) => e.id)));
    await nats.close();
  });
});
