import { jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { expect, it } from "vitest";
import { startStack } from "./stack.js";

// Tests run against a shared NATS as often as against their own: a stack leaves no stream behind.
it("deletes its stream when it closes", async () => {
  const stack = await startStack();
  const nc = await connect({ servers: stack.natsUrl });
  try {
    const jsm = await jetstreamManager(nc);
    await expect(jsm.streams.info(stack.stream)).resolves.toBeDefined();
    await stack.close();
    await expect(jsm.streams.info(stack.stream)).rejects.toThrow(/stream not found/);
  } finally {
    await nc.close();
  }
});
