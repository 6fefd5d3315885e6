import type { DescMessage, MessageInitShape } from "@bufbuild/protobuf";
import { ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import { IDEMPOTENT_REPLAYED_HEADER, invalidArgument, notFound, parseAmount, sqlState, type Sql } from "@ledger/common";
import {
  type ApplyReservationsRequest,
  ApplyReservationsRequestSchema,
  ApplyReservationsResponseSchema,
  type CaptureReservationRequest,
  type ReleaseReservationRequest,
  type ReservationCommandResultSchema,
  type ReserveRequest,
  CaptureReservationRequestSchema,
  CaptureReservationResponseSchema,
  ReleaseReservationRequestSchema,
  ReleaseReservationResponseSchema,
  ReserveRequestSchema,
  ReserveResponseSchema,
  ReservationStatus,
  type ReservationSchema,
  type ReservationService,
} from "@ledger/proto/ledger/v1/reservation_pb.js";
import { groupToProto } from "./groups.js";
import { scopeWith, type ProgramResolver, type Scope } from "./programs.js";
import type { MoneyCommand, ReservationRow } from "./money.js";
import { itemError, type Applied, type ItemAnswer, type Submission } from "./batch-units.js";
import type { createBatcher } from "./batcher.js";
import { callIdempotency, createWritePath } from "./write-path.js";
import type { Outbox } from "@ledger/common";

/** The API form of a reservation. */
function reservationToProto(row: ReservationRow): MessageInitShape<typeof ReservationSchema> {
  return {
    reservationId: row.id,
    programId: row.program_id,
    entityId: row.entity_id,
    amount: row.amount,
    capturedAmount: row.captured_amount,
    status: row.status === "active" ? ReservationStatus.ACTIVE : ReservationStatus.RELEASED,
    currencyCode: row.currency_code,
  };
}

/** Most commands in one ApplyReservations call. */
export const MAX_RESERVATION_COMMANDS = 1000;

/** Caller-chosen ids (hold ids, capture ids) are opaque but bounded. */
function parseCallerId(value: string, field: string): string {
  if (!/^[\w:.-]{1,128}$/.test(value)) throw invalidArgument(`${field} must be 1 to 128 letters, digits, or _ : . -`);
  return value;
}

/**
 * Two concurrent calls with the same caller-chosen id both find no row and both insert; the loser
 * hits the primary key. Once the winner has committed, a second try finds its row and answers
 * idempotently, which is exactly what a repeated call should get.
 */
async function onceMoreOnDuplicate<T>(attempt: () => Promise<T>): Promise<T> {
  try {
    return await attempt();
  } catch (err) {
    if (sqlState(err) !== "23505") throw err;
    return attempt();
  }
}

/** What the reservation handlers need. */
interface ReservationDeps {
  sql: Sql;
  outbox: Outbox;
  batcher: ReturnType<typeof createBatcher>;
  resolveProgram: ProgramResolver;
}

// Each command as a single call and an item of ApplyReservations validate and build it alike.
async function reserveCommand(scope: Scope, ctx: HandlerContext, req: ReserveRequest): Promise<MoneyCommand> {
  const base = await scope(ctx, req.programId);
  const reservationId = parseCallerId(req.reservationId, "reservation_id");
  if (req.entityId === "") throw invalidArgument("entity_id is required");
  const amount = parseAmount(req.amount);
  return { kind: "reserve", ...base, reservationId, entityId: req.entityId, amount };
}

async function captureCommand(scope: Scope, ctx: HandlerContext, req: CaptureReservationRequest): Promise<MoneyCommand> {
  const base = await scope(ctx, req.programId);
  const reservationId = parseCallerId(req.reservationId, "reservation_id");
  const captureId = parseCallerId(req.captureId, "capture_id");
  if (req.destinationEntityId === "") throw invalidArgument("destination_entity_id is required");
  const amount = parseAmount(req.amount);
  return {
    kind: "capture",
    ...base,
    reservationId,
    captureId,
    amount,
    destinationEntityId: req.destinationEntityId,
    description: req.description || `Capture of ${reservationId}`,
  };
}

async function releaseCommand(scope: Scope, ctx: HandlerContext, req: ReleaseReservationRequest): Promise<MoneyCommand> {
  const base = await scope(ctx, req.programId);
  const reservationId = parseCallerId(req.reservationId, "reservation_id");
  return { kind: "release", ...base, reservationId };
}

const reserved = (outcome: Applied) => ({ reservation: reservationToProto(outcome.reservation!) });
const captured = (outcome: Applied) => ({
  reservation: reservationToProto(outcome.reservation!),
  transactionGroup: groupToProto(outcome.group!),
});

/** The reservation primitive holds are built on (docs/architecture.md#the-services-and-who-owns-what: the ledger is the only writer of money). */
export function createReservationService(deps: ReservationDeps): ServiceImpl<typeof ReservationService> {
  const { submit } = createWritePath(deps);

  const scope = scopeWith(deps.resolveProgram);

  return {
    async reserve(req, ctx) {
      const command = await reserveCommand(scope, ctx, req);
      return onceMoreOnDuplicate(() => submit(ctx, ReserveRequestSchema, req, ReserveResponseSchema, command, reserved));
    },

    async captureReservation(req, ctx) {
      const command = await captureCommand(scope, ctx, req);
      return onceMoreOnDuplicate(() =>
        submit(ctx, CaptureReservationRequestSchema, req, CaptureReservationResponseSchema, command, captured),
      );
    },

    async releaseReservation(req, ctx) {
      const command = await releaseCommand(scope, ctx, req);
      return submit(ctx, ReleaseReservationRequestSchema, req, ReleaseReservationResponseSchema, command, reserved);
    },

    applyReservations: (req, ctx) => applyReservations(deps, scope, req, ctx),

    async getReservation(req, ctx) {
      const { accountId, programId } = await scope(ctx, req.programId);
      const reservationId = parseCallerId(req.reservationId, "reservation_id");
      const [row] = await deps.sql<ReservationRow[]>`
        select r.*, e.currency_code from reservations r join entities e on e.account_id = r.account_id and e.id = r.entity_id
        where r.account_id = ${accountId} and r.id = ${reservationId} and r.program_id = ${programId}`;
      if (!row) throw notFound("reservation", reservationId);
      return { reservation: reservationToProto(row) };
    },
  };
}

/** ApplyReservations: each item validated and built on its own, then all submitted as one batch. */
async function applyReservations(deps: ReservationDeps, scope: Scope, req: ApplyReservationsRequest, ctx: HandlerContext) {
  if (req.commands.length === 0 || req.commands.length > MAX_RESERVATION_COMMANDS) {
    throw invalidArgument(`commands must hold 1 to ${MAX_RESERVATION_COMMANDS} items; got ${req.commands.length}`, {
      field: "commands",
    });
  }
  // A malformed item refuses alone: it keeps its place with its error and the others apply.
  const items = await Promise.all(
    req.commands.map(async (item, index): Promise<Submission<DescMessage>> => {
      const { command } = item;
      try {
        switch (command.case) {
          case "reserve":
            return { command: await reserveCommand(scope, ctx, command.value), responseSchema: ReserveResponseSchema, respond: reserved };
          case "capture":
            return {
              command: await captureCommand(scope, ctx, command.value),
              responseSchema: CaptureReservationResponseSchema,
              respond: captured,
            };
          case "release":
            return {
              command: await releaseCommand(scope, ctx, command.value),
              responseSchema: ReleaseReservationResponseSchema,
              respond: reserved,
            };
          default:
            throw invalidArgument(`commands[${index}] names no command`, { field: "commands", index });
        }
      } catch (err) {
        return { command: ConnectError.from(err), responseSchema: ReserveResponseSchema, respond: reserved };
      }
    }),
  );
  const idempotency = callIdempotency(ctx, ApplyReservationsRequestSchema, req);
  const kinds = req.commands.map((item) => item.command.case);
  // Two calls with one reservation id can both insert it; the second try answers from the first's row.
  const answer = await onceMoreOnDuplicate(() =>
    deps.batcher.submitBatch({
      items,
      atomic: false,
      ...(idempotency ? { idempotency } : {}),
      responseSchema: ApplyReservationsResponseSchema,
      respond: (answers) => ({ results: answers.map((a, i) => commandResult(a, kinds[i])) }),
    }),
  );
  if (answer.replayed) ctx.responseHeader.set(IDEMPOTENT_REPLAYED_HEADER, "true");
  return answer.response;
}

/** One item's result: the single call's response under the item's kind, or its error in the batch envelope. */
function commandResult(answer: ItemAnswer, kind: string | undefined): MessageInitShape<typeof ReservationCommandResultSchema> {
  if (answer instanceof ConnectError) {
    return { result: { case: "error", value: Object.assign({}, itemError(answer), { rpcCode: answer.code }) } };
  }
  return { result: { case: kind, value: answer.response } } as MessageInitShape<typeof ReservationCommandResultSchema>;
}
