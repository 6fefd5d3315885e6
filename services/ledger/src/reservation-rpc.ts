import type { MessageInitShape } from "@bufbuild/protobuf";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import { invalidArgument, notFound, parseAmount, sqlState, type Sql } from "@ledger/common";
import {
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
import { commandScope, type ProgramResolver } from "./programs.js";
import type { ReservationRow } from "./money.js";
import type { createBatcher } from "./batcher.js";
import { createWritePath } from "./write-path.js";
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

/** The reservation primitive holds are built on (docs/architecture.md#the-services-and-who-owns-what: the ledger is the only writer of money). */
export function createReservationService(deps: {
  sql: Sql;
  outbox: Outbox;
  batcher: ReturnType<typeof createBatcher>;
  resolveProgram: ProgramResolver;
}): ServiceImpl<typeof ReservationService> {
  const { submit } = createWritePath(deps);

  const scope = (ctx: HandlerContext, programId: string) => commandScope(ctx, deps.resolveProgram, programId);

  return {
    async reserve(req, ctx) {
      const base = await scope(ctx, req.programId);
      const reservationId = parseCallerId(req.reservationId, "reservation_id");
      if (req.entityId === "") throw invalidArgument("entity_id is required");
      const amount = parseAmount(req.amount);
      return onceMoreOnDuplicate(() =>
        submit(
          ctx,
          ReserveRequestSchema,
          req,
          ReserveResponseSchema,
          { kind: "reserve", ...base, reservationId, entityId: req.entityId, amount },
          (outcome) => ({
            reservation: reservationToProto(outcome.reservation!),
          }),
        ),
      );
    },

    async captureReservation(req, ctx) {
      const base = await scope(ctx, req.programId);
      const reservationId = parseCallerId(req.reservationId, "reservation_id");
      const captureId = parseCallerId(req.captureId, "capture_id");
      if (req.destinationEntityId === "") throw invalidArgument("destination_entity_id is required");
      const amount = parseAmount(req.amount);
      const command = {
        kind: "capture" as const,
        ...base,
        reservationId,
        captureId,
        amount,
        destinationEntityId: req.destinationEntityId,
        description: req.description || `Capture of ${reservationId}`,
      };
      return onceMoreOnDuplicate(() =>
        submit(ctx, CaptureReservationRequestSchema, req, CaptureReservationResponseSchema, command, (outcome) => ({
          reservation: reservationToProto(outcome.reservation!),
          transactionGroup: groupToProto(outcome.group!),
        })),
      );
    },

    async releaseReservation(req, ctx) {
      const base = await scope(ctx, req.programId);
      const reservationId = parseCallerId(req.reservationId, "reservation_id");
      return submit(
        ctx,
        ReleaseReservationRequestSchema,
        req,
        ReleaseReservationResponseSchema,
        { kind: "release", ...base, reservationId },
        (outcome) => ({
          reservation: reservationToProto(outcome.reservation!),
        }),
      );
    },

    async getReservation(req, ctx) {
      const { accountId, programId } = await scope(ctx, req.programId);
      const reservationId = parseCallerId(req.reservationId, "reservation_id");
      const [row] = await deps.sql<ReservationRow[]>`
        select r.*, e.currency_code from reservations r join entities e on e.id = r.entity_id
        where r.id = ${reservationId} and r.account_id = ${accountId} and r.program_id = ${programId}`;
      if (!row) throw notFound("reservation", reservationId);
      return { reservation: reservationToProto(row) };
    },
  };
}
