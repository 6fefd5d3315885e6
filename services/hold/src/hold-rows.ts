// A hold and its captures as stored, and what a client sees of them: in the API and in the
// `hold.*` events alike.
import { create, type MessageInitShape, type MessageShape } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { type CallOrigin, newId } from "@ledger/common";
import { EventSchema, type Event } from "@ledger/proto/events/v1/events_pb.js";
import { CaptureHoldResponseSchema, HoldReleaseReason, HoldStatus, type HoldSchema } from "@ledger/proto/hold/v1/hold_pb.js";

/** A hold as stored. `creating` and `releasing` are the in-flight states recovery finishes. */
export interface HoldRow {
  id: string;
  account_id: string;
  program_id: string;
  entity_id: string;
  amount: bigint;
  captured_amount: bigint;
  status: "creating" | "held" | "partially_captured" | "captured" | "releasing" | "released";
  release_reason: string | null;
  currency_code: string;
  expires_at: Date | null;
  description: string;
  created_at: Date;
  updated_at: Date;
}

/** A capture as stored: pending until the ledger's transfer is recorded here. */
export interface CaptureRow {
  id: string;
  hold_id: string;
  amount: bigint;
  destination_entity_id: string;
  description: string;
  status: "pending" | "done";
  transaction_group_id: string | null;
  created_at: Date;
}

/**
 * The operation a client's idempotency key waits on: the intent its first request recorded. Each
 * completion (by the request or by recovery) answers the keys of its operation. These keys are the
 * client's, a layer above the hold's own ids that keep the calls to the ledger idempotent.
 */
export const operations = {
  create: (holdId: string) => `create:${holdId}`,
  capture: (captureId: string) => `capture:${captureId}`,
  release: (holdId: string) => `release:${holdId}`,
};

/** The statuses a client sees, as stored and as the API's enum. */
export const HOLD_STATUS_OF: Record<string, HoldStatus> = {
  held: HoldStatus.HELD,
  partially_captured: HoldStatus.PARTIALLY_CAPTURED,
  captured: HoldStatus.CAPTURED,
  released: HoldStatus.RELEASED,
};

/** The status a client sees: a release in flight still shows what the hold was. */
export function visibleStatus(row: HoldRow): string {
  if (row.status === "releasing") return row.captured_amount > 0n ? "partially_captured" : "held";
  return row.status;
}

const RELEASE_REASON_OF: Record<string, HoldReleaseReason> = {
  requested: HoldReleaseReason.REQUESTED,
  expired: HoldReleaseReason.EXPIRED,
};

/**
 * What a client sees of a hold, in the API and in the `hold.*` events alike, with `more` fields
 * added (assigned, not spread: V8 makes a new hidden class for each property after a spread, on
 * every call; docs/decisions/hidden-classes-per-call.md). The release reason goes in twice, as
 * the enum and as the word the previous version reads (docs/operations.md#upgrade-notes).
 */
function holdFields<T extends object>(row: HoldRow, more: T) {
  const releaseReason = row.status === "released" ? (row.release_reason ?? "") : "";
  // An undefined field is an unset one to protobuf-es's `create`, which every caller goes through.
  return Object.assign(
    {
      holdId: row.id,
      entityId: row.entity_id,
      programId: row.program_id,
      amount: row.amount,
      capturedAmount: row.captured_amount,
      description: row.description,
      releaseReason,
      holdReleaseReason: RELEASE_REASON_OF[releaseReason] ?? HoldReleaseReason.UNSPECIFIED,
      currencyCode: row.currency_code,
      createdAt: timestampFromDate(row.created_at),
      expiresAt: row.expires_at ? timestampFromDate(row.expires_at) : undefined,
    },
    more,
  );
}

function holdStatus(row: HoldRow): HoldStatus {
  return HOLD_STATUS_OF[visibleStatus(row)] ?? HoldStatus.UNSPECIFIED;
}

/** The API form of a hold. */
export function holdToProto(row: HoldRow): MessageInitShape<typeof HoldSchema> {
  return holdFields(row, { status: holdStatus(row), updatedAt: timestampFromDate(row.updated_at) });
}

/** What a capture answers: the hold after it and the transfer it made. */
export function captureResponse(hold: HoldRow, capture: CaptureRow): MessageShape<typeof CaptureHoldResponseSchema> {
  return create(CaptureHoldResponseSchema, {
    hold: holdToProto(hold),
    amount: capture.amount,
    transactionGroupId: capture.transaction_group_id ?? "",
  });
}

export function holdEvent(
  type: "hold.created" | "hold.captured" | "hold.released",
  row: HoldRow,
  origin: CallOrigin,
  capture?: CaptureRow,
): Event {
  const captured = capture
    ? {
        amount: capture.amount,
        destinationEntityId: capture.destination_entity_id,
        transactionGroupId: capture.transaction_group_id ?? "",
      }
    : undefined;
  return create(EventSchema, {
    id: newId("event"),
    type,
    accountId: row.account_id,
    programId: row.program_id,
    created: timestampFromDate(new Date()),
    requestId: origin.requestId,
    traceparent: origin.trace.traceparent,
    // The status twice too: the enum, and the word the previous version reads.
    data: { case: "hold", value: holdFields(row, { status: visibleStatus(row), holdStatus: holdStatus(row), captured }) },
  });
}
