// The hold lifecycle as the RPC handlers use it: a client's create, capture and release, each
// its steps in order, reads, and the background work of expiry and recovery.
import { fromBinary, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import { invalidArgument, isId, newId, notFound } from "@ledger/common";
import { CaptureHoldResponseSchema, CreateHoldResponseSchema, ReleaseHoldResponseSchema } from "@ledger/proto/hold/v1/hold_pb.js";
import { finishCapture, finishCreate, finishRelease, type HoldDeps } from "./hold-completions.js";
import { keyClaim, startCapture, startCreate, startRelease, type CaptureHold, type CreateHold, type ReleaseHold } from "./hold-intents.js";
import { expireDue, recover } from "./hold-recovery.js";
import type { HoldRow } from "./hold-rows.js";

/** The answer to a client's call: the response, and whether it is the stored one of an earlier call with its key. */
export interface Answer<O extends DescMessage> {
  response: MessageShape<O>;
  replayed: boolean;
}

/**
 * The hold lifecycle. Each operation is three steps: record the intent here (hold-intents.ts), call
 * the ledger (idempotent by hold id or capture id), record the result here with its event
 * (hold-completions.ts). A crash between steps leaves an intent that `recover` finishes by repeating
 * the same ledger call (hold-recovery.ts).
 */
export function createHolds(deps: HoldDeps) {
  const { sql, crash } = deps;
  return {
    async create(args: CreateHold): Promise<Answer<typeof CreateHoldResponseSchema>> {
      const id = newId("hold");
      const claim = keyClaim(args.accountId, args.idempotency);
      const started = await startCreate(deps, id, args, claim);
      if (started.kind === "replay") return { response: fromBinary(CreateHoldResponseSchema, started.response), replayed: true };
      const [hold] = await started.value;
      crash("after_create_intent");
      return { response: await finishCreate(deps, hold!, args.origin, claim !== undefined), replayed: false };
    },

    async capture(args: CaptureHold): Promise<Answer<typeof CaptureHoldResponseSchema>> {
      if (!isId("hold", args.holdId)) throw notFound("hold", args.holdId);
      const claim = keyClaim(args.accountId, args.idempotency);
      const started = await startCapture(deps, args, claim);
      if (started.kind === "replay") return { response: fromBinary(CaptureHoldResponseSchema, started.response), replayed: true };
      crash("after_capture_intent");
      const { hold, capture } = started.value;
      return { response: await finishCapture(deps, hold, capture, args.origin, claim !== undefined), replayed: false };
    },

    async release(args: ReleaseHold): Promise<Answer<typeof ReleaseHoldResponseSchema>> {
      const claim = keyClaim(args.accountId, args.idempotency);
      const started = await startRelease(deps, args, claim);
      if (started.kind === "replay") return { response: fromBinary(ReleaseHoldResponseSchema, started.response), replayed: true };
      crash("after_release_intent");
      return { response: await finishRelease(deps, started.value, args.origin), replayed: false };
    },

    async get(accountId: string, programId: string, holdId: string): Promise<HoldRow> {
      if (!isId("hold", holdId)) throw notFound("hold", holdId);
      const [row] = await sql<HoldRow[]>`select * from holds where id = ${holdId} and account_id = ${accountId}`;
      if (!row || row.status === "creating" || (programId !== "" && row.program_id !== programId)) throw notFound("hold", holdId);
      return row;
    },

    async list(entityId: string, page: { limit: number; before?: string | undefined; status?: string | undefined }): Promise<HoldRow[]> {
      const status = page.status ?? "";
      return sql<HoldRow[]>`
        select * from holds
        where entity_id = ${entityId} and status <> 'creating'
          and (${status} = '' or (case when status = 'releasing'
                                       then (case when captured_amount > 0 then 'partially_captured' else 'held' end)
                                       else status end) = ${status})
          ${page.before ? sql`and id < ${page.before}` : sql``}
        order by id desc limit ${page.limit + 1}`;
    },

    /** Releases every hold whose `expires_at` has passed. Several replicas never release one twice. */
    expireDue: () => expireDue(deps),

    /** Finishes operations a crashed process left half done, older than `olderThanMs` (hold-recovery.ts). */
    recover: (olderThanMs: number) => recover(deps, olderThanMs),
  };
}

/** Validates an expiry time: ISO 8601 in the future, at most a year ahead. */
export function parseExpiry(date: Date | undefined): Date | undefined {
  if (!date) return undefined;
  if (date.getTime() <= Date.now()) throw invalidArgument("expires_at must be in the future");
  if (date.getTime() > Date.now() + 366 * 24 * 3600 * 1000) throw invalidArgument("expires_at must be within a year");
  return date;
}
