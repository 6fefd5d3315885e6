import { describe, expect, it } from "vitest";
import { createLifecycle } from "./lifecycle.js";
import { createLogger } from "./logger.js";

// The close order on its own: steps that record what happens to them, no services.

function lifecycleOf() {
  const lines: Array<{ level: number; msg: string; step?: string }> = [];
  const log = createLogger("test", "info", { write: (line: string) => void lines.push(JSON.parse(line)) });
  return { lifecycle: createLifecycle("test", log), lines };
}

describe("createLifecycle", () => {
  it("closes last-started first, logs each step, and goes on past a step that fails", async () => {
    const { lifecycle, lines } = lifecycleOf();
    const closed: string[] = [];
    const broken = new Error("pool would not end");
    lifecycle.onClose("database", () => closed.push("database"));
    lifecycle.onClose("NATS", () => {
      throw broken;
    });
    lifecycle.onClose("RPC server", async () => {
      await new Promise((resolve) => setTimeout(resolve, 10));
      closed.push("RPC server");
    });
    await expect(lifecycle.close()).rejects.toBe(broken);
    expect(closed).toEqual(["RPC server", "database"]);
    expect(lines.map((l) => [l.level, l.msg])).toEqual([
      [30, "closing RPC server"],
      [30, "closing NATS"],
      [50, "closing NATS failed; closing the rest"],
      [30, "closing database"],
      [30, "test stopped"],
    ]);
  });

  it("starts and stops a part with run, and closes each step once however often close is called", async () => {
    const { lifecycle } = lifecycleOf();
    const events: string[] = [];
    const loop = { start: () => void events.push("start"), stop: async () => void events.push("stop") };
    expect(lifecycle.run("loop", loop)).toBe(loop);
    expect(events).toEqual(["start"]);
    await Promise.all([lifecycle.close(), lifecycle.close()]);
    await lifecycle.close();
    expect(events).toEqual(["start", "stop"]);
  });

  it("closes what a failed start had started, then passes the start's error on", async () => {
    const { lifecycle } = lifecycleOf();
    const closed: string[] = [];
    const refused = new Error("port in use");
    const start = lifecycle.starting(async () => {
      lifecycle.onClose("database", () => closed.push("database"));
      lifecycle.onClose("outbox relay", () => closed.push("outbox relay"));
      throw refused;
    });
    await expect(start).rejects.toBe(refused);
    expect(closed).toEqual(["outbox relay", "database"]);
  });
});
