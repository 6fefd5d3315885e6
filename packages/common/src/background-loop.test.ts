import { describe, expect, it, vi } from "vitest";
import { backgroundLoop, type BackgroundLoopOptions } from "./background-loop.js";
import { createLogger } from "./logger.js";

// The loop helper on its own, with iterations that script what happens: no database, no NATS.

/** A logger whose lines land in `lines`. */
function capturingLog() {
  const lines: Array<{ level: number; msg: string; [field: string]: unknown }> = [];
  const log = createLogger("test", "info", { write: (line: string) => void lines.push(JSON.parse(line)) });
  return { log, lines };
}

const delay = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Waits until `check` holds (checked every 5 ms, 2 s at most). */
async function until(check: () => boolean): Promise<void> {
  const deadline = Date.now() + 2_000;
  while (!check()) {
    if (Date.now() > deadline) throw new Error("condition not met within 2 s");
    await delay(5);
  }
}

function loopOf(iteration: BackgroundLoopOptions["iteration"], overrides: Partial<BackgroundLoopOptions> = {}) {
  const { log, lines } = capturingLog();
  const loop = backgroundLoop({ name: "test loop", log, iteration, idleMs: 10_000, backoff: { firstMs: 20, maxMs: 80 }, ...overrides });
  return { loop, lines };
}

describe("backgroundLoop", () => {
  it("backs off more after each failure in a row, up to the cap, and starts over after a success", async () => {
    // Fake timers, so the gaps are the loop's own and not the machine's load.
    vi.useFakeTimers();
    try {
      const starts: number[] = [];
      // Five failures, one success, two failures, then idle for good.
      const script = ["fail", "fail", "fail", "fail", "fail", "ok", "fail", "fail"];
      const { loop } = loopOf(async () => {
        starts.push(Date.now());
        const step = script.shift();
        if (step === "fail") throw new Error("down");
        return step === "ok";
      });
      loop.start();
      await vi.advanceTimersByTimeAsync(1_000);
      const stopped = loop.stop();
      await vi.runAllTimersAsync();
      await stopped;
      const gaps = starts.slice(1).map((t, i) => t - starts[i]!);
      // 20, 40, 80, 80 (capped), 80, then the success goes on at once, then 20, 40 again.
      expect(gaps).toEqual([20, 40, 80, 80, 80, 0, 20, 40]);
    } finally {
      vi.useRealTimers();
    }
  });

  it("logs a streak of failures once when it starts and once when it ends, and goes on", async () => {
    let runs = 0;
    const failures: unknown[] = [];
    const { loop, lines } = loopOf(
      async () => {
        runs++;
        if (runs <= 3) throw new Error(`down ${runs}`);
        return false;
      },
      { onFailure: (err) => failures.push(err), failureMessage: "cannot reach the thing" },
    );
    loop.start();
    await until(() => runs === 4);
    await loop.stop();
    expect(failures.map((e) => (e as Error).message)).toEqual(["down 1", "down 2", "down 3"]);
    expect(lines.map((l) => [l.level, l.msg])).toEqual([
      [40, "cannot reach the thing"],
      [30, "test loop works again"],
    ]);
    expect(lines[0]).toMatchObject({ err: "down 1", loop: "test loop" });
    expect(lines[1]).toMatchObject({ after_failures: 3 });
  });

  it("runs again at once while an iteration says there is more, and sleeps when there is none", async () => {
    let runs = 0;
    const { loop } = loopOf(async () => ++runs < 5);
    loop.start();
    await until(() => runs === 5);
    await delay(50);
    // The fifth found nothing: the loop sleeps its idle 10 s.
    expect(runs).toBe(5);
    await loop.stop();
  });

  it("sleeps the milliseconds an iteration asks for instead of its idle sleep, and wake cuts that short too", async () => {
    const started: number[] = [];
    const { loop } = loopOf(async () => {
      started.push(Date.now());
      return started.length < 3 ? 40 : false;
    });
    loop.start();
    await until(() => started.length === 3);
    // Two short sleeps of about 40 ms, not the idle 10 s.
    expect(started[2]! - started[0]!).toBeGreaterThanOrEqual(70);
    expect(started[2]! - started[0]!).toBeLessThan(2_000);
    await delay(50);
    expect(started).toHaveLength(3);
    loop.wake();
    await until(() => started.length === 4);
    await loop.stop();
  });

  it("wake cuts an idle sleep short; a wake during an iteration makes the loop look again at once", async () => {
    let runs = 0;
    let release: (() => void) | undefined;
    const { loop } = loopOf(async () => {
      runs++;
      if (runs === 2) await new Promise<void>((resolve) => (release = resolve));
      return false;
    });
    loop.start();
    await until(() => runs === 1 && loop.idle);
    // Asleep for 10 s; a wake starts the next iteration now.
    loop.wake();
    await until(() => runs === 2 && release !== undefined);
    expect(loop.idle).toBe(false);
    // Woken while it works: it does not sleep after this iteration.
    loop.wake();
    release!();
    await until(() => runs === 3);
    await delay(30);
    expect(runs).toBe(3);
    await loop.stop();
  });

  it("does not let wake cut a backoff short", async () => {
    let runs = 0;
    const { loop } = loopOf(
      async () => {
        runs++;
        throw new Error("down");
      },
      { backoff: { firstMs: 10_000, maxMs: 10_000 } },
    );
    loop.start();
    await until(() => runs === 1);
    loop.wake();
    await delay(30);
    expect(runs).toBe(1);
    // A backoff is no idle sleep: a wake does not cut it, so it does not count as idle.
    expect(loop.idle).toBe(false);
    await loop.stop();
  });

  it("stop waits for the iteration in progress, starts no other, and cuts a sleep short", async () => {
    let runs = 0;
    let finished = false;
    let release: (() => void) | undefined;
    const { loop } = loopOf(async () => {
      runs++;
      await new Promise<void>((resolve) => (release = resolve));
      finished = true;
      return true;
    });
    loop.start();
    await until(() => release !== undefined);
    expect(loop.running).toBe(true);
    let stopped = false;
    const stopping = loop.stop().then(() => (stopped = true));
    expect(loop.running).toBe(false);
    await delay(20);
    expect(stopped).toBe(false);
    release!();
    await stopping;
    expect(finished).toBe(true);
    expect(runs).toBe(1);

    // Asleep (here before its first iteration, 10 s): stop ends the sleep and no iteration runs.
    const sleeper = loopOf(
      async () => {
        throw new Error("must not run");
      },
      { firstDelayMs: 10_000 },
    );
    sleeper.loop.start();
    const at = Date.now();
    await sleeper.loop.stop();
    expect(Date.now() - at).toBeLessThan(100);
    expect(sleeper.lines).toEqual([]);
  });

  it("reports an iteration that does not return within its stall limit, once, and again when it ends", async () => {
    vi.useFakeTimers();
    try {
      let release: (() => void) | undefined;
      let runs = 0;
      const { loop, lines } = loopOf(
        () => {
          runs++;
          return runs === 1 ? new Promise<boolean>((resolve) => (release = () => resolve(false))) : Promise.resolve(false);
        },
        { stallWarnMs: 30_000 },
      );
      loop.start();
      await vi.advanceTimersByTimeAsync(29_000);
      expect(lines.filter((l) => l.level >= 50)).toEqual([]);
      await vi.advanceTimersByTimeAsync(2_000);
      await vi.advanceTimersByTimeAsync(60_000);
      const errors = lines.filter((l) => l.level >= 50);
      expect(errors).toHaveLength(1);
      expect(errors[0]).toMatchObject({ loop: "test loop", msg: expect.stringContaining("stuck in one iteration") });
      release!();
      await vi.advanceTimersByTimeAsync(1);
      expect(lines.at(-1)).toMatchObject({ loop: "test loop", msg: "test loop iteration ended after stalling" });
      const stopped = loop.stop();
      await vi.runAllTimersAsync();
      await stopped;
    } finally {
      vi.useRealTimers();
    }
  });

  it("never reports a loop whose iteration is meant to last (stallWarnMs 0)", async () => {
    vi.useFakeTimers();
    try {
      let release: (() => void) | undefined;
      const { loop, lines } = loopOf(() => new Promise<boolean>((resolve) => (release = () => resolve(false))), { stallWarnMs: 0 });
      loop.start();
      await vi.advanceTimersByTimeAsync(600_000);
      expect(lines).toEqual([]);
      const stopped = loop.stop();
      release!();
      await vi.runAllTimersAsync();
      await stopped;
    } finally {
      vi.useRealTimers();
    }
  });
});
