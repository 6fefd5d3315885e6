import type { Socket } from "node:net";
import { Gauge } from "prom-client";
import { metricsRegistry } from "@ledger/common";

const connectionsOpen = new Gauge({
  name: "webhook_connections",
  help: "Connections to webhook receivers open in this process, busy or idle.",
  registers: [metricsRegistry],
});

// Connections a destination may have whatever the estimate says: enough for a slow start.
const FLOOR = 4;
// How many times the connections an answer rate needs at the fastest answer time seen lately.
const HEADROOM = 4;
// The estimate's window: answers counted and fastest answer time, per window and the one before.
const WINDOW_MS = 1_000;
// No answer for this long while attempts wait: the open connections are held by a slow receiver.
const STALL_MS = 10;
// No attempt waits longer than this for a connection, whatever the estimate.
const MAX_WAIT_MS = 1_000;

/** One attempt's place at the gate, from admission to its end. */
export class Ticket {
  /** Set while a new connection is expected for this attempt and not yet seen. */
  fresh: boolean;
  readonly admittedAt: number;
  constructor(fresh: boolean, admittedAt: number) {
    this.fresh = fresh;
    this.admittedAt = admittedAt;
  }
}

interface Waiter {
  since: number;
  admit: (ticket: Ticket) => void;
}

/**
 * Decides, for one destination's keep-alive pool, whether an attempt that finds every open
 * connection busy goes out on a new connection now or waits for one of them to come free.
 *
 * A destination with a backlog has up to its `max_concurrency` attempts in flight (128 by
 * default), and each open HTTPS connection costs this process about 115 KB and the receiver a
 * TLS handshake (docs/operations.md#memory). Against a receiver that answers in a millisecond,
 * most of those attempts wait for this process's own event loop, and 128 connections carry
 * little more than a handful do (docs/decisions/webhook-connection-policy.md). So a new
 * connection opens only while fewer are open than the answers a second times the fastest answer
 * time of late would keep busy (with headroom, and at least four): what the receiver itself needs, not what this process's backlog asks for. Against a
 * slow receiver that number is above what is open (each answer takes long), so waiting attempts
 * get a connection at once; while nothing at all is answered (a receiver slower than anything
 * measured yet) one more opens every 10 ms; and no attempt waits longer than a second.
 */
export class ConnectionGate {
  private open = 0;
  // Admitted attempts expecting a connection that has not shown up yet.
  private opening = 0;
  // Admitted attempts not yet ended: each holds one connection, open or opening.
  private busy = 0;
  private readonly waiting: Waiter[] = [];
  private timer: NodeJS.Timeout | undefined;
  private readonly seen = new WeakSet<Socket>();

  private windowStart: number;
  private answers = 0;
  private fastestMs = Number.POSITIVE_INFINITY;
  private previousRate = 0;
  private previousFastestMs = Number.POSITIVE_INFINITY;
  private lastAnswerAt = Number.NEGATIVE_INFINITY;

  constructor(private readonly now: () => number = () => performance.now()) {
    this.windowStart = now();
  }

  /** Admits an attempt at once (the usual case) or once a connection is there for it. */
  enter(): Ticket | Promise<Ticket> {
    if (this.waiting.length === 0) {
      const ticket = this.tryAdmit();
      if (ticket) return ticket;
    }
    return new Promise<Ticket>((admit) => {
      this.waiting.push({ since: this.now(), admit });
      this.arm();
    });
  }

  /** The attempt's request got its socket: counts the connection when it is a new one. */
  socket(ticket: Ticket, socket: Socket): void {
    if (ticket.fresh) {
      ticket.fresh = false;
      this.opening--;
    }
    if (this.seen.has(socket)) return;
    this.seen.add(socket);
    this.open++;
    connectionsOpen.inc();
    socket.once("close", () => {
      this.open--;
      connectionsOpen.dec();
      this.admitWaiting();
    });
  }

  /** The attempt ended; `answered` when the receiver answered, whose time feeds the estimate. */
  leave(ticket: Ticket, answered: boolean): void {
    this.busy--;
    if (ticket.fresh) {
      ticket.fresh = false;
      this.opening--;
    }
    if (answered) this.recordAnswer(this.now() - ticket.admittedAt);
    this.admitWaiting();
  }

  /** Connections that would be busy if answers came as fast as the fastest of late, with headroom. */
  wanted(): number {
    const now = this.now();
    const elapsed = Math.max(now - this.windowStart, 100);
    const rate = Math.max(this.previousRate, (this.answers * 1_000) / elapsed);
    const fastestMs = Math.min(this.fastestMs, this.previousFastestMs);
    if (!Number.isFinite(fastestMs)) return FLOOR;
    return FLOOR + (HEADROOM * rate * fastestMs) / 1_000;
  }

  /** What the gate holds, for tests. */
  state(): { open: number; busy: number; waiting: number } {
    return { open: this.open, busy: this.busy, waiting: this.waiting.length };
  }

  private recordAnswer(ms: number): void {
    const now = this.now();
    if (now - this.windowStart >= WINDOW_MS) {
      // A window long past says nothing about now: its rate is spread over all the time since.
      this.previousRate = (this.answers * 1_000) / (now - this.windowStart);
      this.previousFastestMs = now - this.windowStart < 2 * WINDOW_MS ? this.fastestMs : Number.POSITIVE_INFINITY;
      this.windowStart = now;
      this.answers = 0;
      this.fastestMs = Number.POSITIVE_INFINITY;
    }
    this.answers++;
    if (ms < this.fastestMs) this.fastestMs = ms;
    this.lastAnswerAt = now;
  }

  /** A ticket when a connection is free or may be opened, else undefined. */
  private tryAdmit(): Ticket | undefined {
    if (this.busy < this.open + this.opening) {
      this.busy++;
      return new Ticket(false, this.now());
    }
    if (this.open + this.opening < this.wanted()) return this.admitFresh();
    return undefined;
  }

  private admitFresh(): Ticket {
    this.busy++;
    this.opening++;
    return new Ticket(true, this.now());
  }

  private admitWaiting(): void {
    while (this.waiting.length > 0) {
      const ticket = this.tryAdmit();
      if (!ticket) return;
      this.waiting.shift()!.admit(ticket);
    }
  }

  private arm(): void {
    if (this.timer || this.waiting.length === 0) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      const now = this.now();
      if (this.waiting.length > 0 && now - this.lastAnswerAt >= STALL_MS) this.waiting.shift()!.admit(this.admitFresh());
      while (this.waiting.length > 0 && now - this.waiting[0]!.since >= MAX_WAIT_MS) this.waiting.shift()!.admit(this.admitFresh());
      this.arm();
    }, STALL_MS);
  }
}
