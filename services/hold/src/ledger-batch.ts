import type { JsonObject, MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { appError, createGroupScheduler, metricsRegistry, type CallOrigin, type ErrorCode, type Logger, type Queued } from "@ledger/common";
import type {
  ApplyReservationsResponse,
  CaptureReservationRequestSchema,
  CaptureReservationResponse,
  ReleaseReservationRequestSchema,
  ReleaseReservationResponse,
  ReservationCommandSchema,
  ReserveRequestSchema,
  ReserveResponse,
} from "@ledger/proto/ledger/v1/reservation_pb.js";
import { Counter, Histogram } from "prom-client";
import type { LedgerClients } from "./ledger-client.js";

const callSize = new Histogram({
  name: "hold_ledger_call_commands",
  help: "Reservation commands (reserve, capture, release) sent to the ledger per ApplyReservations call.",
  buckets: [1, 2, 4, 8, 16, 32, 64, 128],
  registers: [metricsRegistry],
});
const singleCalls = new Counter({
  name: "hold_ledger_single_calls_total",
  help: "Reservation commands sent as single calls because the ledger does not have ApplyReservations (an older version).",
  registers: [metricsRegistry],
});

/** Settings of the batched calls to the ledger. */
export interface LedgerBatchOptions {
  ledger: LedgerClients;
  log: Logger;
  /** Most commands in one call. */
  maxBatch: number;
  /** Calls in flight at once; commands arriving meanwhile wait and go together. */
  maxInFlight: number;
  /** While another call is in flight, how long a new one waits for company (ms). */
  lingerMs: number;
}

type Command = MessageInitShape<typeof ReservationCommandSchema>["command"] & {};

interface Job extends Queued {
  accountId: string;
  origin: CallOrigin | undefined;
  command: Command;
  resolve(value: unknown): void;
  reject(err: unknown): void;
}

/**
 * The hold service's reservation calls to the ledger, many holds to one `ApplyReservations` call:
 * the commands of concurrent hold operations (of one account) go together, so a group of holds
 * costs the ledger one call, one unit of its group commit and one round trip instead of one each.
 * Each command keeps its own answer: the item's response, or its error rebuilt as the single call
 * would have thrown it (same RPC code and error code), so callers cannot tell the two apart.
 *
 * A call that fails as a whole (the ledger unreachable, a timeout) rejects each of its commands with
 * that error, as a failed single call would: whether the ledger applied them is unknown, and the
 * hold's recovery repeats them (each is idempotent by its hold or capture id). Commands on one
 * reservation never share a call. A call of one command carries that command's request id and
 * trace; a call of several carries none, rather than tie the others' ledger work to one client's trace.
 *
 * A ledger of an older version answers `Unimplemented`: from then on this process sends single calls.
 */
export function createLedgerBatch(options: LedgerBatchOptions) {
  const { ledger, log } = options;
  let batched = true;
  const scheduler = createGroupScheduler<Job>(Object.assign({}, options, { run }));

  async function run(jobs: Job[]): Promise<void> {
    const byAccount = new Map<string, Job[]>();
    for (const job of jobs) {
      const mine = byAccount.get(job.accountId);
      if (mine) mine.push(job);
      else byAccount.set(job.accountId, [job]);
    }
    await Promise.all([...byAccount.values()].map((mine) => (batched ? call(mine) : Promise.all(mine.map(single)))));
  }

  async function call(jobs: Job[]): Promise<void> {
    const first = jobs[0]!;
    callSize.observe(jobs.length);
    let results: ApplyReservationsResponse["results"];
    try {
      ({ results } = await ledger.reservations.applyReservations(
        { commands: jobs.map((job) => ({ command: job.command })) },
        ledger.asAccount(first.accountId, jobs.length === 1 ? first.origin : undefined),
      ));
    } catch (err) {
      if (ConnectError.from(err).code === Code.Unimplemented) {
        if (batched) log.warn("the ledger has no ApplyReservations (an older version): calling it once per command");
        batched = false;
        await Promise.all(jobs.map(single));
        return;
      }
      for (const job of jobs) job.reject(err);
      return;
    }
    jobs.forEach((job, i) => {
      const result = results[i]?.result;
      if (!result || result.case === undefined) job.reject(new ConnectError("the ledger answered no result for a command", Code.Internal));
      else if (result.case === "error") {
        const { rpcCode, code, message, details } = result.value;
        job.reject(
          appError(rpcCode in Code ? (rpcCode as Code) : Code.Unknown, code as ErrorCode, message, details as JsonObject | undefined),
        );
      } else job.resolve(result.value);
    });
  }

  /** One command as its own call. */
  async function single(job: Job): Promise<void> {
    singleCalls.inc();
    const options = ledger.asAccount(job.accountId, job.origin);
    const { reservations } = ledger;
    try {
      const { command } = job;
      if (command.case === "reserve") job.resolve(await reservations.reserve(command.value, options));
      else if (command.case === "capture") job.resolve(await reservations.captureReservation(command.value, options));
      else if (command.case === "release") job.resolve(await reservations.releaseReservation(command.value, options));
    } catch (err) {
      job.reject(err);
    }
  }

  function enqueue<T>(accountId: string, reservationId: string, origin: CallOrigin | undefined, command: Command): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      scheduler.enqueue({
        accountId,
        origin,
        command,
        keys: [reservationId],
        size: 1,
        queuedAt: performance.now(),
        resolve: resolve as (value: unknown) => void,
        reject,
      });
    });
  }

  return {
    reserve(accountId: string, req: MessageInitShape<typeof ReserveRequestSchema>, origin?: CallOrigin): Promise<ReserveResponse> {
      return enqueue(accountId, req.reservationId ?? "", origin, { case: "reserve", value: req });
    },
    capture(
      accountId: string,
      req: MessageInitShape<typeof CaptureReservationRequestSchema>,
      origin?: CallOrigin,
    ): Promise<CaptureReservationResponse> {
      return enqueue(accountId, req.reservationId ?? "", origin, { case: "capture", value: req });
    },
    release(
      accountId: string,
      req: MessageInitShape<typeof ReleaseReservationRequestSchema>,
      origin?: CallOrigin,
    ): Promise<ReleaseReservationResponse> {
      return enqueue(accountId, req.reservationId ?? "", origin, { case: "release", value: req });
    },
  };
}

export type LedgerBatch = ReturnType<typeof createLedgerBatch>;
