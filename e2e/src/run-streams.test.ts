import { randomBytes } from "node:crypto";
import { jetstreamManager, type JetStreamManager } from "@nats-io/jetstream";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { afterAll, beforeAll, expect, inject, it } from "vitest";
import { deleteStreamsStartingWith } from "./events.js";
import { startStack } from "./stack.js";

// A test run against a shared NATS leaves none of its JetStream streams behind: a stack deletes its
// own when it closes, and the run's teardown (run-streams.ts) sweeps what is left by the run's
// prefix, never another run's streams.

let nc: NatsConnection;
let jsm: JetStreamManager;
beforeAll(async () => {
  nc = await connect({ servers: inject("natsUrl") });
  jsm = await jetstreamManager(nc);
});
afterAll(async () => nc?.close());

const exists = (name: string) =>
  jsm.streams.info(name).then(
    () => true,
    () => false,
  );

it("names a stack's stream after the run, and deletes it with its consumers when the stack closes", async () => {
  const stack = await startStack({ notification: {} });
  try {
    expect(stack.stream.startsWith(inject("natsStreamPrefix"))).toBe(true);
    await expect.poll(() => exists(stack.stream)).toBe(true);
    // The notification service's durable consumer lives on the stream and goes with it.
    await expect.poll(async () => (await jsm.streams.info(stack.stream)).state.consumer_count).toBeGreaterThan(0);
  } finally {
    await stack.close();
  }
  expect(await exists(stack.stream)).toBe(false);
});

it("sweeps the streams under a run's prefix and leaves another run's", async () => {
  // A part of this run's namespace, so that the sweep cannot touch the streams of test files
  // running beside this one; and a stream of another run with the same ending.
  const tag = randomBytes(4).toString("hex");
  const prefix = `${inject("natsStreamPrefix")}SWEEP_${tag}_`;
  const ours = [`${prefix}a`, `${prefix}b`];
  const theirs = `TEST_otherrun${tag}_SWEEP_${tag}_a`;
  for (const [i, name] of [...ours, theirs].entries()) await jsm.streams.add({ name, subjects: [`sweep${tag}${i}.>`] });
  try {
    expect(await deleteStreamsStartingWith(inject("natsUrl"), prefix)).toEqual(ours);
    expect(await Promise.all(ours.map(exists))).toEqual([false, false]);
    expect(await exists(theirs)).toBe(true);
  } finally {
    await jsm.streams.delete(theirs).catch(() => {});
    for (const name of ours) await jsm.streams.delete(name).catch(() => {});
  }
});

it("refuses a prefix that is not a test run's", async () => {
  for (const prefix of ["", "TEST_", "LEDGER_EVENTS", "BENCH_"]) {
    await expect(deleteStreamsStartingWith(inject("natsUrl"), prefix)).rejects.toThrow("not a test run's");
  }
});
