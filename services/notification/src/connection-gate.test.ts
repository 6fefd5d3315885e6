import { EventEmitter } from "node:events";
import type { Socket } from "node:net";
import { afterEach, describe, expect, it, vi } from "vitest";
import { ConnectionGate, Ticket } from "./connection-gate.js";

// The gate's bookkeeping with a clock and sockets of its own; send.test.ts drives it through real
// HTTPS connections.

function fakeSocket(): Socket & EventEmitter {
  return new EventEmitter() as Socket & EventEmitter;
}

function admitted(entered: Ticket | Promise<Ticket>): Ticket {
  expect(entered).toBeInstanceOf(Ticket);
  return entered as Ticket;
}

afterEach(() => {
  vi.useRealTimers();
});

describe("connection gate", () => {
  it("opens four connections at once, then reuses a freed one for the next attempt in line", async () => {
    let now = 0;
    const gate = new ConnectionGate(() => now);
    const sockets = [fakeSocket(), fakeSocket(), fakeSocket(), fakeSocket()];
    const first = sockets.map((socket) => {
      const ticket = admitted(gate.enter());
      expect(ticket.fresh).toBe(true);
      gate.socket(ticket, socket);
      return ticket;
    });
    expect(gate.state()).toEqual({ open: 4, busy: 4, waiting: 0 });

    let fifth: Ticket | undefined;
    void (gate.enter() as Promise<Ticket>).then((t) => (fifth = t));
    expect(gate.state().waiting).toBe(1);

    now = 5;
    gate.leave(first[0]!, true);
    await Promise.resolve();
    expect(fifth?.fresh).toBe(false);
    gate.socket(fifth!, sockets[0]!);
    expect(gate.state()).toEqual({ open: 4, busy: 4, waiting: 0 });

    // Everything ends and the connections close: nothing is left counted.
    for (const t of [...first.slice(1), fifth!]) gate.leave(t, true);
    for (const s of sockets) s.emit("close");
    expect(gate.state()).toEqual({ open: 0, busy: 0, waiting: 0 });
  });

  it("wants the connections the answer rate needs at the fastest answer time, with headroom", () => {
    let now = 0;
    const gate = new ConnectionGate(() => now);
    expect(gate.wanted()).toBe(4);
    // 100 answers in 500 ms (200 a second), each 5 ms after its admission: 1 busy, 4 + 4 × 1 wanted.
    for (let i = 0; i < 100; i++) {
      now = 5 * i;
      const ticket = admitted(gate.enter());
      now += 5;
      gate.leave(ticket, true);
    }
    expect(gate.wanted()).toBeCloseTo(4 + 4 * 200 * 0.005, 5);
    // One slow answer does not move the fastest.
    const slow = admitted(gate.enter());
    now += 300;
    gate.leave(slow, true);
    expect(gate.wanted()).toBeLessThan(4 + 4 * 200 * 0.005);
  });

  it("admits a waiting attempt on a new connection when nothing has answered for 10 ms", () => {
    vi.useFakeTimers();
    let now = 0;
    const gate = new ConnectionGate(() => now);
    for (let i = 0; i < 4; i++) gate.socket(admitted(gate.enter()), fakeSocket());
    let fifth: Ticket | undefined;
    void (gate.enter() as Promise<Ticket>).then((t) => (fifth = t));
    now = 10;
    vi.advanceTimersByTime(10);
    return Promise.resolve().then(() => {
      expect(fifth?.fresh).toBe(true);
      expect(gate.state()).toEqual({ open: 4, busy: 5, waiting: 0 });
    });
  });

  it("lets no attempt wait longer than a second, however the estimate judges", async () => {
    vi.useFakeTimers();
    let now = 0;
    const gate = new ConnectionGate(() => now);
    const held: Ticket[] = [];
    for (let i = 0; i < 4; i++) held.push(admitted(gate.enter()));
    // Four more through the stall rule (nothing answers), one every 10 ms.
    const more = Array.from({ length: 4 }, () => gate.enter() as Promise<Ticket>);
    for (let ms = 10; ms <= 40; ms += 10) {
      now = ms;
      vi.advanceTimersByTime(10);
    }
    held.push(...(await Promise.all(more)));
    for (const t of held) gate.socket(t, fakeSocket());
    expect(gate.state()).toEqual({ open: 8, busy: 8, waiting: 0 });

    // Seven stay busy; the eighth answers every 9 ms (never a 10 ms stall), 9 ms after its
    // admission, so the estimate wants no more than the eight open. 150 attempts wait in line:
    // on that one connection the last would wait 150 × 9 ms.
    let current = held.pop()!;
    const admissions: Ticket[] = [];
    const line = Array.from({ length: 150 }, () => (gate.enter() as Promise<Ticket>).then((t) => void admissions.push(t)));
    for (let step = 1; admissions.length < line.length && step < 300; step++) {
      now = 40 + 9 * step;
      vi.advanceTimersByTime(9);
      const before = admissions.length;
      gate.leave(current, true);
      await Promise.resolve();
      await Promise.resolve();
      const reused = admissions.slice(before).find((t) => !t.fresh);
      if (reused) current = reused;
    }
    expect(admissions).toHaveLength(150);
    const waited = admissions.map((t) => t.admittedAt - 40);
    expect(Math.max(...waited)).toBeLessThanOrEqual(1_010);
    // Some went by the estimate's reuse, the rest on new connections once they had waited a second.
    expect(admissions.filter((t) => !t.fresh).length).toBeGreaterThan(50);
    expect(admissions.some((t) => t.fresh && t.admittedAt - 40 >= 1_000)).toBe(true);
  });
});
