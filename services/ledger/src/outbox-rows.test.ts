import { randomBytes, randomUUID } from "node:crypto";
import { copyFile, mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { create, toBinary } from "@bufbuild/protobuf";
import { timestampNow } from "@bufbuild/protobuf/wkt";
import { jetstreamManager } from "@nats-io/jetstream";
import postgres from "postgres";
import { afterAll, describe, expect, inject, it } from "vitest";
import {
  connectNats,
  createLogger,
  createOutbox,
  ensureEventStream,
  eventSubject,
  metricsRegistry,
  migrate,
  newId,
  type NatsHandle,
  type Outbox,
  type Sql,
} from "@ledger/common";
import { EventSchema, type Event } from "@ledger/proto/events/v1/events_pb.js";
import { readStream } from "@ledger/e2e";

// The outbox keeps one row per write, many events to a row (docs/architecture.md#the-transactional-outbox-and-the-relay):
// the relay publishes each event as its own message, in the row's order; a row whose publish fails
// part way goes again whole, and JetStream drops the copies by msgID; the backlog gauge counts
// events; and the migration carries per-event rows over, also those an old version writes after it.
// Both services that have an outbox run the same migration; each is checked here on a schema of its own.

const log = createLogger("outbox-rows-test", "silent");
const migrations = {
  ledger: fileURLToPath(new URL("../migrations", import.meta.url)),
  hold: fileURLToPath(new URL("../../hold/migrations", import.meta.url)),
};
const closers: Array<() => Promise<unknown>> = [];
afterAll(async () => {
  for (const close of closers.reverse()) await close();
});

/** The migrations of `service` before `before` (every one without it), in a folder of their own. */
async function migrationsBefore(service: keyof typeof migrations, before?: string): Promise<string> {
  if (!before) return migrations[service];
  const dir = await mkdtemp(join(tmpdir(), "outbox-migrations-"));
  for (const file of await readdir(migrations[service]))
    if (file < before) await copyFile(join(migrations[service], file), join(dir, file));
  closers.push(() => rm(dir, { recursive: true }));
  return dir;
}

/**
 * A fresh schema migrated up to (not including) the outbox change when `before` is set, else fully;
 * `migrateAll` applies the rest, or those before `until`.
 */
async function schemaFor(service: keyof typeof migrations, before?: string) {
  const schema = `outbox_${service}_${randomBytes(4).toString("hex")}`;
  const sql = postgres(inject("databaseUrl"), {
    max: 4,
    types: { bigint: postgres.BigInt },
    onnotice: () => {},
    connection: { search_path: schema },
  }) as unknown as Sql;
  closers.push(async () => {
    await sql.unsafe(`drop schema if exists "${schema}" cascade`);
    await sql.end({ timeout: 2 });
  });
  // Only the migrations that came before `before`, as a database of the previous version has them.
  await migrate(sql, schema, await migrationsBefore(service, before), log);
  return { sql, schema, migrateAll: async (until?: string) => migrate(sql, schema, await migrationsBefore(service, until), log) };
}

/** A stream of its own on the shared NATS server, and a relay for `sql`'s outbox publishing to it. */
function relayFor(sql: Sql, service: string, pollMs = 20): { outbox: Outbox; nats: NatsHandle; stream: string; prefix: string } {
  const tag = randomBytes(4).toString("hex");
  const stream = `${inject("natsStreamPrefix")}OUTBOX_${tag}`;
  const prefix = `outbox${tag}`;
  const nats = connectNats({ natsUrl: inject("natsUrl") }, service, log);
  // As the ledger's: rows keyed by account (only the tests on the ledger's current schema enqueue).
  const outbox = createOutbox({ service, sql, nats, stream: { name: stream, subjectPrefix: prefix }, log, pollMs, rowsByAccount: true });
  closers.push(async () => {
    await outbox.stop();
    const nc = nats.current();
    if (nc) await (await jetstreamManager(nc)).streams.delete(stream).catch(() => {});
    await nats.close();
  });
  return { outbox, nats, stream, prefix };
}

function event(n: number): Event {
  return create(EventSchema, {
    id: newId("event"),
    type: "transaction.created",
    accountId: "acc_outbox",
    programId: "prg_outbox",
    created: timestampNow(),
    data: { case: "transaction", value: { transactionGroupId: `grp_${n}`, amount: BigInt(n), currencyCode: "USD", status: "posted" } },
  });
}

const rowsLeft = async (sql: Sql) => (await sql<{ n: number }[]>`select count(*)::int as n from outbox_writes`)[0]!.n;

/** The value of metric `name` for these labels, undefined while it has none. */
async function metricValue(name: string, labels: Record<string, string>): Promise<number | undefined> {
  const metric = await metricsRegistry.getSingleMetric(name)!.get();
  return metric.values.find((v) => Object.entries(labels).every(([label, value]) => v.labels[label] === value))?.value;
}

const gauge = (name: string, service: string) => metricValue(name, { service });
const relayTransactions = async (service: string, found: "events" | "none") =>
  (await metricValue("outbox_relay_transactions_total", { service, found })) ?? 0;

describe("outbox rows of many events", () => {
  it("publishes nothing to a stream another installation's database owns, and keeps the events", async () => {
    const { sql, schema } = await schemaFor("ledger");
    const service = `other-${randomBytes(3).toString("hex")}`;
    const { outbox, nats, stream, prefix } = relayFor(sql, service);
    // The stream was made by a relay of the same schema on another database: another installation.
    const elsewhere = { schema, id: randomUUID(), database: "ledger at 10.9.9.9:5432" };
    await ensureEventStream(await nats.connected(), { name: stream, subjectPrefix: prefix }, [elsewhere], log, { applyLimits: true });
    await sql.begin((tx) => outbox.enqueue(tx as never, [event(1), event(2)]));
    const errors = async () =>
      (await metricsRegistry.getSingleMetric("outbox_publish_errors_total")!.get()).values.find((v) => v.labels["service"] === service)
        ?.value ?? 0;
    outbox.start();
    await expect.poll(errors, { timeout: 20_000 }).toBeGreaterThanOrEqual(2);
    expect(await rowsLeft(sql)).toBe(1);
    expect(await readStream(inject("natsUrl"), stream)).toEqual([]);
  });

  it("wakes one idle lane per commit, so no lane looks for rows another has taken", async () => {
    const { sql } = await schemaFor("ledger");
    const service = `wake-${randomBytes(3).toString("hex")}`;
    // No polls during the test: every look after the first is one a wake asked for.
    const { outbox } = relayFor(sql, service, 60_000);
    outbox.start();
    // Each of the two lanes looks once at start and finds nothing.
    await expect.poll(() => relayTransactions(service, "none")).toBe(2);
    for (let commit = 1; commit <= 3; commit++) {
      await sql.begin((tx) => outbox.enqueue(tx as never, [event(commit)]));
      outbox.wake();
      await expect.poll(() => rowsLeft(sql)).toBe(0);
      await expect.poll(() => relayTransactions(service, "events")).toBe(commit);
    }
    // Give a second lane, had it been woken, time to look and find the rows gone.
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(await relayTransactions(service, "none")).toBe(2);
  });

  it("writes one row per account of the events, each row with its account's events in order", async () => {
    const { sql } = await schemaFor("ledger");
    const { outbox } = relayFor(sql, `accounts-${randomBytes(3).toString("hex")}`, 60_000);
    const [a1, b1, a2] = [event(1), Object.assign(event(2), { accountId: "acc_other" }), event(3)];
    await sql.begin((tx) => outbox.enqueue(tx as never, [a1, b1, a2]));
    const rows = await sql<{ account_id: string; event_ids: string[] }[]>`select account_id, event_ids from outbox_writes order by seq`;
    expect(rows).toEqual([
      { account_id: "acc_outbox", event_ids: [a1.id, a2.id] },
      { account_id: "acc_other", event_ids: [b1.id] },
    ]);
  });

  it("publishes a row's events in order, each once, and counts events in the backlog", async () => {
    const { sql } = await schemaFor("ledger");
    const service = `rows-${randomBytes(3).toString("hex")}`;
    const { outbox, stream, prefix } = relayFor(sql, service);
    const writes = [
      Array.from({ length: 250 }, (_, i) => event(i)),
      [event(1_000)],
      Array.from({ length: 40 }, (_, i) => event(2_000 + i)),
    ];
    await sql.begin(async (tx) => {
      for (const events of writes) await outbox.enqueue(tx as never, events);
    });
    expect(await rowsLeft(sql)).toBe(3);
    // Before its relay starts, the gauge knows nothing of this outbox; afterwards it counts events.
    expect(await gauge("outbox_backlog", service)).toBeUndefined();
    outbox.start();
    await expect.poll(() => rowsLeft(sql), { timeout: 20_000 }).toBe(0);
    expect(await gauge("outbox_backlog", service)).toBe(0);

    const stored = await readStream(inject("natsUrl"), stream);
    const sent = writes.flat();
    // Every event once, and each row's events in the row's order. Rows themselves may interleave:
    // the relay's two lanes can each take some of them (SKIP LOCKED) and publish side by side.
    expect(stored.map((s) => s.msgId).sort()).toEqual(sent.map((e) => e.id).sort());
    const storedIds = stored.map((s) => s.msgId);
    for (const row of writes) {
      const ids = new Set(row.map((e) => e.id));
      expect(storedIds.filter((id) => ids.has(id))).toEqual(row.map((e) => e.id));
    }
    for (const s of stored) {
      expect(s.subject).toBe(eventSubject(prefix, "transaction.created"));
      expect(s.event.id).toBe(s.msgId);
    }
    const amountOf = new Map(sent.map((e) => [e.id, e.data.case === "transaction" ? e.data.value.amount : -2n]));
    for (const s of stored) expect(s.event.data.case === "transaction" ? s.event.data.value.amount : -1n).toBe(amountOf.get(s.msgId));
  });

  it("republishes a whole row when a publish in its middle fails, and JetStream drops the copies", async () => {
    const { sql } = await schemaFor("ledger");
    const service = `rows-${randomBytes(3).toString("hex")}`;
    const { outbox, nats, stream } = relayFor(sql, service);
    // The middle event of the first row goes to a subject no stream listens on yet: JetStream
    // stores its neighbours and answers it with "no responders", so the batch fails and stays.
    const other = `outboxother${randomBytes(4).toString("hex")}`;
    const otherStream = `${inject("natsStreamPrefix")}OTHER_${other}`;
    const first = [event(1), event(2), event(3)];
    const rows = [outbox.writeOf(first), outbox.writeOf([event(4), event(5)])];
    rows[0]!.subjects[1] = eventSubject(other, "transaction.created");
    await sql.begin(async (tx) => {
      for (const row of rows)
        await tx`
          insert into outbox_writes (account_id, events, event_ids, subjects, payloads)
          values ('acc_outbox', ${row.eventIds.length}, ${row.eventIds}::text[], ${row.subjects}::text[],
            array(select decode(p, 'base64') from unnest(${row.payloads}::text[]) with ordinality as u(p, n) order by n))`;
    });
    const errors = async () =>
      (await metricsRegistry.getSingleMetric("outbox_publish_errors_total")!.get()).values.find((v) => v.labels["service"] === service)
        ?.value ?? 0;
    outbox.start();
    await expect.poll(errors, { timeout: 20_000 }).toBeGreaterThanOrEqual(2);
    // Nothing was deleted, and the backlog counts the five events of the two rows.
    expect(await rowsLeft(sql)).toBe(2);
    expect(await gauge("outbox_backlog", service)).toBe(5);
    expect(await gauge("outbox_oldest_age_seconds", service)).toBeGreaterThanOrEqual(0);
    const landed = await readStream(inject("natsUrl"), stream);
    expect(landed.map((s) => s.msgId)).toContain(first[0]!.id);
    expect(landed.map((s) => s.msgId)).not.toContain(first[1]!.id);

    // Once a stream takes the middle subject, the relay publishes both rows whole: the events that
    // had landed come back as duplicates and are dropped by msgID, so each is stored once.
    const nc = nats.current()!;
    const jsm = await jetstreamManager(nc);
    await jsm.streams.add({ name: otherStream, subjects: [`${other}.>`] });
    closers.push(() => jsm.streams.delete(otherStream).catch(() => {}));
    await expect.poll(() => rowsLeft(sql), { timeout: 20_000 }).toBe(0);
    const stored = await readStream(inject("natsUrl"), stream);
    expect(stored.map((s) => s.msgId)).toEqual([first[0]!.id, first[2]!.id, ...rows[1]!.eventIds]);
    const elsewhere = await readStream(inject("natsUrl"), otherStream);
    expect(elsewhere.map((s) => s.msgId)).toEqual([first[1]!.id]);
    expect(await gauge("outbox_backlog", service)).toBe(0);
  });
});

describe.each(["ledger", "hold"] as const)("upgrading the %s outbox from one row per event", (service) => {
  it("publishes the events that waited in the old table and those an old version writes after the migration", async () => {
    const { sql, migrateAll } = await schemaFor(service, service === "ledger" ? "0005" : "0004");
    const old = Array.from({ length: 5 }, (_, i) => event(i));
    const relayService = `upgrade-${randomBytes(3).toString("hex")}`;
    const { outbox, stream, prefix } = relayFor(sql, relayService);
    const subject = eventSubject(prefix, "transaction.created");
    // What the previous version wrote: one row per event.
    const insertOld = (events: Event[]) =>
      sql`insert into outbox ${sql(
        events.map((e) => ({ event_id: e.id, subject, payload: Buffer.from(toBinary(EventSchema, e)) })),
        "event_id",
        "subject",
        "payload",
      )}`;
    await insertOld(old.slice(0, 3));
    await insertOld(old.slice(3));
    // The ledger's 0014 drops the per-event table, once no replica of a version that wrote it runs.
    const perEventDropped = service === "ledger" ? "0014" : undefined;
    await migrateAll(perEventDropped);
    expect((await sql<{ n: number }[]>`select count(*)::int as n from outbox`)[0]!.n).toBe(0);
    expect(await rowsLeft(sql)).toBe(5);
    // A replica of the previous version still running during a rolling upgrade writes the old way.
    const late = [event(10), event(11)];
    await insertOld(late);
    expect((await sql<{ n: number }[]>`select count(*)::int as n from outbox`)[0]!.n).toBe(0);
    expect(await rowsLeft(sql)).toBe(7);
    if (perEventDropped) {
      // Rows waiting when the rows became keyed by account keep a blank account, in their order.
      await migrateAll();
      const waiting = await sql<{ account_id: string }[]>`select account_id from outbox_writes order by seq`;
      expect(waiting.map((r) => r.account_id)).toEqual(Array(7).fill(""));
    }

    outbox.start();
    await expect.poll(() => rowsLeft(sql), { timeout: 20_000 }).toBe(0);
    const stored = await readStream(inject("natsUrl"), stream);
    expect(stored.map((s) => s.msgId)).toEqual([...old, ...late].map((e) => e.id));
    expect(stored.map((s) => s.event.id)).toEqual([...old, ...late].map((e) => e.id));
  });
});

describe("the outbox migration beside replicas of the previous version", () => {
  it("waits for an old relay and an old writer in flight, then moves exactly the rows they left", async () => {
    const { sql, migrateAll } = await schemaFor("ledger", "0005");
    const row = (e: Event) => ({
      event_id: e.id,
      subject: "old.events.transaction.created",
      payload: Buffer.from(toBinary(EventSchema, e)),
    });
    const relayed = [event(1), event(2)];
    const waiting = [event(3)];
    const written = [event(4)];
    await sql`insert into outbox ${sql([...relayed, ...waiting].map(row), "event_id", "subject", "payload")}`;
    const step = () => {
      let go!: () => void;
      const gate = new Promise<void>((resolve) => {
        go = resolve;
      });
      return { gate, go };
    };
    const relayHolds = step();
    const writerHolds = step();
    const release = step();
    // An old relay holds the first two rows (publishing them); an old writer has inserted a row
    // and not committed yet.
    const oldRelay = sql.begin(async (tx) => {
      const rows = await tx<{ seq: bigint }[]>`select seq from outbox order by seq limit 2 for update skip locked`;
      relayHolds.go();
      await release.gate;
      await tx`delete from outbox where seq = any(${rows.map((r) => `${r.seq}`)}::int8[])`;
    });
    const oldInsert = sql.begin(async (tx) => {
      await tx`insert into outbox ${tx(written.map(row), "event_id", "subject", "payload")}`;
      writerHolds.go();
      await release.gate;
    });
    await Promise.all([relayHolds.gate, writerHolds.gate]);
    const migrating = migrateAll("0014");
    // The migration waits for both.
    const first = await Promise.race([migrating.then(() => "migrated"), new Promise((resolve) => setTimeout(resolve, 300, "waiting"))]);
    expect(first).toBe("waiting");
    release.go();
    await Promise.all([oldRelay, oldInsert, migrating]);
    const moved = await sql<{ event_ids: string[] }[]>`select event_ids from outbox_writes order by seq`;
    // The relayed rows are gone for good; the waiting one and the one committed meanwhile moved, once each.
    expect(moved.flatMap((r) => r.event_ids)).toEqual([...waiting, ...written].map((e) => e.id));
    expect((await sql<{ n: number }[]>`select count(*)::int as n from outbox`)[0]!.n).toBe(0);
  });
});
