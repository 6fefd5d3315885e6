// Webhook delivery: commit-to-receipt latency at a steady (open-loop) rate, and how fast one
// notification process drains a backlog.
import type { WebhookReceiver } from "@ledger/testing";
import { TransactionStatus } from "@ledger/proto/ledger/v1/ledger_pb.js";
import type { BacklogProbe } from "./backlog.js";
import { errorCode, REQUEST_TIMEOUT_MS, type Rpc } from "./connect.js";
import { percentile } from "./closed-loop.js";
import { cpuPercent, type CpuSnapshot, type CpuSource, type Layout, type System } from "./system.js";
import type { Fixtures } from "./workloads.js";

/** The receiver path the bench's destination points at. */
export const HOOK_PATH = "/hook";

/** What the receiver got so far, parsed once per request. */
export class DeliveryTracker {
  private seen = 0;
  /** First arrival (ms since epoch) of each transaction group's `transaction.created`. */
  readonly arrivals = new Map<string, number>();
  /** Deliveries per event id: exactly-once means every count is 1. */
  readonly counts = new Map<string, number>();

  /** Counts only what arrives from now on: a receiver shared by several layouts has the earlier ones' deliveries. */
  constructor(private readonly receiver: WebhookReceiver) {
    this.seen = receiver.received(HOOK_PATH).length;
  }

  receiverConnections(): number {
    return this.receiver.connections();
  }

  update(): void {
    const list = this.receiver.received(HOOK_PATH);
    for (; this.seen < list.length; this.seen++) {
      const got = list[this.seen]!;
      const eventId = String(got.headers["x-service-event-id"] ?? "");
      this.counts.set(eventId, (this.counts.get(eventId) ?? 0) + 1);
      const body = JSON.parse(got.body) as { type?: string; data?: { transaction_group_id?: string } };
      const group = body.data?.transaction_group_id;
      if (body.type === "transaction.created" && group && !this.arrivals.has(group)) this.arrivals.set(group, got.at);
    }
  }

  /** Waits until every group has arrived, at most `capMs`; answers the ones still missing. */
  async waitFor(groups: Iterable<string>, capMs: number): Promise<string[]> {
    const deadline = Date.now() + capMs;
    let missing = [...groups];
    while (Date.now() < deadline) {
      this.update();
      missing = missing.filter((g) => !this.arrivals.has(g));
      if (missing.length === 0) break;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    return missing;
  }
}

export interface WebhookLatency {
  /** The system's layout, once the report has it. */
  layout?: Layout;
  /** Transactions per second asked for. */
  rate: number;
  sent: number;
  /** Commits per second from the first send to the last answer (below `rate` when the ledger could not keep up). */
  achievedPerSecond: number;
  /** Commit (HTTP response) to receipt, ms. */
  p50: number;
  p99: number;
  max: number;
  /** Transactions whose event never arrived within the wait. */
  missing: number;
  errors: Record<string, number>;
  /** Share of one core each process used from the first send until every event arrived (or the wait ended), %. */
  cpu?: Record<CpuSource, number>;
}

export interface DrainResult {
  /** When it ran: on a fresh database, or after the steady runs (the state the two-process drain meets). */
  when: string;
  events: number;
  /** Notification processes sharing the work. */
  processes: number;
  /** TLS connections the receiver accepted during the drain. */
  newConnections: number;
  seconds: number;
  perSecond: number;
  missing: number;
  /** Share of one core each process used from the resume until the last delivery arrived, %. */
  cpu: Record<CpuSource, number>;
}

/** At most this many paced transactions wait for an answer at once, so a stalled ledger cannot pile up unbounded work. */
const MAX_IN_FLIGHT = 2_000;
/** Items per batch call of the paced load at most. */
const BATCH_MAX_ITEMS = 200;

/** Sends `n` posted transfers in the webhook account (one call: `CreateTransaction` for one, `CreateTransactions` for more); answers their group ids. */
function sender(rpc: Rpc, fixtures: Fixtures): (n: number) => Promise<string[]> {
  const transfer = () => {
    const a = fixtures.entities[Math.floor(Math.random() * fixtures.entities.length)]!;
    let b = a;
    for (let i = 0; b === a && i < 100; i++) b = fixtures.entities[Math.floor(Math.random() * fixtures.entities.length)]!;
    return {
      description: "bench webhook",
      status: TransactionStatus.POSTED,
      form: { case: "transfer" as const, value: { fromEntityId: a, toEntityId: b, amount: 1n } },
    };
  };
  return async (n) => {
    if (n === 1) {
      const res = await rpc.ledger.createTransaction(transfer());
      return [res.transactionGroup!.transactionGroupId];
    }
    const res = await rpc.ledger.createTransactions({ transactions: Array.from({ length: n }, () => ({ transaction: transfer() })) });
    return res.results.map((r) => {
      if (r.result.case !== "transactionGroup") throw Object.assign(new Error("a batch item was refused"), { code: "item_refused" });
      return r.result.value.transactionGroupId;
    });
  };
}

/**
 * Open loop: transaction i is sent at start + i/rate whether or not earlier ones answered, so a
 * slow system shows as latency rather than as a politely slower sender. With `batchMs` the
 * transactions that fall due within each such tick go out together as one batch call (each still
 * its own transaction with its own event): a busy ledger's writers batch, and the figure measured
 * is the webhooks' pace, not the ledger's single-call ceiling on two shared cores.
 */
export async function pacedLatency(
  rpc: Rpc,
  fixtures: Fixtures,
  tracker: DeliveryTracker,
  rate: number,
  seconds: number,
  onProgress: (line: string) => void,
  { batchMs = 0, cpu }: { batchMs?: number; cpu?: () => CpuSnapshot } = {},
): Promise<WebhookLatency> {
  const send = sender(rpc, fixtures);
  const cpuFrom = cpu?.();
  const total = Math.max(1, Math.round(rate * seconds));
  const commits = new Map<string, number>();
  const errors: Record<string, number> = {};
  let launched = 0;
  let inFlight = 0;
  let lastAnswer = 0;
  const start = performance.now();
  const progress = setInterval(() => onProgress(`webhooks ${rate}/s: ${launched}/${total} sent, ${commits.size} committed`), 1_000);
  try {
    while (launched < total) {
      const due = Math.min(total, Math.floor(((performance.now() - start) / 1000) * rate) + 1);
      while (launched < due && inFlight < MAX_IN_FLIGHT) {
        const n = batchMs > 0 ? Math.min(due - launched, BATCH_MAX_ITEMS) : 1;
        launched += n;
        inFlight += n;
        send(n)
          .then(
            (groups) => {
              const at = Date.now();
              for (const group of groups) commits.set(group, at);
            },
            (err: unknown) => {
              const code = errorCode(err);
              errors[code] = (errors[code] ?? 0) + n;
            },
          )
          .finally(() => {
            inFlight -= n;
            lastAnswer = performance.now();
          });
      }
      await new Promise((resolve) => setTimeout(resolve, Math.max(1, batchMs)));
    }
    // Each call has its own timeout, so this wait ends.
    const deadline = Date.now() + REQUEST_TIMEOUT_MS + 1_000;
    while (inFlight > 0 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 5));
    const missing = await tracker.waitFor(commits.keys(), 60_000);
    const cpuUsed = cpu && cpuFrom ? cpuPercent(cpuFrom, cpu()) : undefined;
    const latencies = [...commits].filter(([g]) => tracker.arrivals.has(g)).map(([g, at]) => tracker.arrivals.get(g)! - at);
    latencies.sort((a, b) => a - b);
    return {
      rate,
      sent: total,
      achievedPerSecond: commits.size / Math.max((lastAnswer - start) / 1000, 1 / rate),
      p50: percentile(latencies, 0.5),
      p99: percentile(latencies, 0.99),
      max: latencies.at(-1) ?? 0,
      missing: missing.length,
      errors,
      ...(cpuUsed ? { cpu: cpuUsed } : {}),
    };
  } finally {
    clearInterval(progress);
  }
}

/**
 * Deliveries per second of the notification processes: pause them (SIGSTOP), commit `events`
 * transactions and let the ledger publish them, resume them, and time until the receiver has all.
 */
export async function drain(
  system: System,
  probe: BacklogProbe,
  rpc: Rpc,
  fixtures: Fixtures,
  tracker: DeliveryTracker,
  events: number,
  processes: number,
  when: string,
  onProgress: (line: string) => void,
): Promise<DrainResult> {
  const send = sender(rpc, fixtures);
  const groups: string[] = [];
  system.signal("notification", "SIGSTOP");
  try {
    let next = 0;
    await Promise.all(
      Array.from({ length: 32 }, async () => {
        while (next < events) {
          next++;
          groups.push(...(await send(1)));
        }
      }),
    );
    onProgress(
      `drain (${processes} process${processes > 1 ? "es" : ""}): ${groups.length} committed while notification is paused; waiting for the outbox`,
    );
    // The consumer cannot empty while paused, so wait for the outbox alone.
    const deadline = Date.now() + 60_000;
    while ((await probe.read()).outbox > 0 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 50));
  } finally {
    system.signal("notification", "SIGCONT");
  }
  const resumed = Date.now();
  const cpuFrom = system.cpuSnapshot();
  const connectionsBefore = tracker.receiverConnections();
  const progress = setInterval(
    () => onProgress(`drain (${processes}): ${groups.filter((g) => tracker.arrivals.has(g)).length}/${groups.length} delivered`),
    1_000,
  );
  try {
    const missing = await tracker.waitFor(groups, 120_000);
    const cpu = cpuPercent(cpuFrom, system.cpuSnapshot());
    const last = Math.max(resumed, ...groups.map((g) => tracker.arrivals.get(g) ?? 0));
    const seconds = (last - resumed) / 1000;
    return {
      when,
      events: groups.length,
      processes,
      newConnections: tracker.receiverConnections() - connectionsBefore,
      seconds,
      perSecond: seconds > 0 ? (groups.length - missing.length) / seconds : 0,
      missing: missing.length,
      cpu,
    };
  } finally {
    clearInterval(progress);
  }
}

/** The fast destination's commit-to-receipt at one rate, alone and then beside a destination that answers after 2 s. */
export interface SlowBeside {
  rate: number;
  alone: WebhookLatency;
  beside: WebhookLatency;
  /** Requests the slow destination got meanwhile. */
  slowReceived: number;
}

/** The steady runs send what fell due every 10 ms as one batch call (about 11 transactions a call at 1,100/s). */
const STEADY_BATCH_MS = 10;

/** The receiver path of the slow destination. */
export const SLOW_PATH = "/slow";

/**
 * Runs the paced load twice at `rate`: alone, then with a second destination of the same account
 * that answers every delivery after 2 s (disabled afterwards, which ends its backlog
 * `endpoint_disabled`: only the fast destination's deliveries count in the invariants).
 */
export async function slowBeside(
  rpc: Rpc,
  fixtures: Fixtures,
  tracker: DeliveryTracker,
  receiver: WebhookReceiver,
  addSlow: (url: string) => Promise<() => Promise<void>>,
  rate: number,
  seconds: number,
  onProgress: (line: string) => void,
  {
    cpu,
    prepare = async () => {},
  }: {
    cpu?: () => CpuSnapshot;
    /** Runs before each of the two runs (the bench vacuums the notification tables there). */
    prepare?: () => Promise<void>;
  } = {},
): Promise<SlowBeside> {
  await prepare();
  const alone = await pacedLatency(rpc, fixtures, tracker, rate, seconds, onProgress, { batchMs: STEADY_BATCH_MS, cpu });
  // The receiver may be shared with an earlier run: count this run's slow requests only.
  const slowBefore = receiver.received(SLOW_PATH).length;
  await prepare();
  const removeSlow = await addSlow(receiver.endpoint(SLOW_PATH, () => ({ status: 200, delayMs: 2_000 })));
  try {
    const beside = await pacedLatency(rpc, fixtures, tracker, rate, seconds, (line) => onProgress(`beside a slow destination: ${line}`), {
      batchMs: STEADY_BATCH_MS,
      cpu,
    });
    return { rate, alone, beside, slowReceived: receiver.received(SLOW_PATH).length - slowBefore };
  } finally {
    await removeSlow();
  }
}
