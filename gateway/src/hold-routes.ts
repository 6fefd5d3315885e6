import { timestampDate } from "@bufbuild/protobuf/wkt";
import { enumWordOr, invalidArgument } from "@ledger/common";
import { HoldReleaseReasonSchema, HoldStatusSchema, type Hold } from "@ledger/proto/hold/v1/hold_pb.js";
import { amountField, limitParam, optionalParam, parseIsoTime, requiredParam, stringField, type Fields } from "./input.js";
import { enumParam, enumWord, renderPage } from "./render.js";
import type { Route } from "./routes.js";

/** A hold as the REST API shows it (gateway/openapi.yaml, schema Hold). */
export function renderHold(hold: Hold) {
  return {
    hold_id: hold.holdId,
    entity_id: hold.entityId,
    amount: hold.amount,
    captured_amount: hold.capturedAmount,
    status: enumWord(HoldStatusSchema, hold.status),
    expires_at: hold.expiresAt ? timestampDate(hold.expiresAt).toISOString() : null,
    description: hold.description,
    // The enum; an answer stored by the previous version has only the string.
    release_reason: enumWordOr(HoldReleaseReasonSchema, hold.holdReleaseReason, hold.releaseReason) || null,
    currency_code: hold.currencyCode,
    program_id: hold.programId,
    created_at: hold.createdAt ? timestampDate(hold.createdAt).toISOString() : null,
  };
}

function expiresAtField(body: Fields) {
  const raw = stringField(body, "expires_at");
  if (raw === "") return undefined;
  const time = parseIsoTime(raw);
  if (!time)
    throw invalidArgument("expires_at must be an ISO 8601 time with a time zone, like 2026-12-01T12:00:00Z", { field: "expires_at" });
  return time;
}

/** The hold paths (docs/api.md#endpoints). */
export const holdRoutes: Route[] = [
  {
    method: "POST",
    path: "/hold",
    body: ["amount", "entity_id", "expires_at", "description"],
    async handle({ body, programId, call }, { hold }) {
      const expiresAt = expiresAtField(body);
      const res = await hold.createHold(
        {
          programId,
          entityId: stringField(body, "entity_id"),
          amount: amountField(body, "amount"),
          description: stringField(body, "description"),
          ...(expiresAt ? { expiresAt } : {}),
        },
        call,
      );
      return { hold: renderHold(res.hold!) };
    },
  },
  {
    method: "POST",
    path: "/hold/capture",
    body: ["hold_id", "amount", "destination_entity_id", "description"],
    async handle({ body, programId, call }, { hold }) {
      const res = await hold.captureHold(
        {
          programId,
          holdId: stringField(body, "hold_id"),
          amount: amountField(body, "amount"),
          destinationEntityId: stringField(body, "destination_entity_id"),
          description: stringField(body, "description"),
        },
        call,
      );
      return { hold: renderHold(res.hold!), transaction: { amount: res.amount, transaction_group_id: res.transactionGroupId } };
    },
  },
  {
    method: "POST",
    path: "/hold/release",
    body: ["hold_id"],
    async handle({ body, programId, call }, { hold }) {
      const res = await hold.releaseHold({ programId, holdId: stringField(body, "hold_id") }, call);
      return { hold: renderHold(res.hold!) };
    },
  },
  {
    method: "GET",
    path: "/hold",
    query: ["hold_id"],
    async handle({ query, programId, call }, { hold }) {
      const res = await hold.getHold({ programId, holdId: requiredParam(query, "hold_id") }, call);
      return { hold: renderHold(res.hold!) };
    },
  },
  {
    method: "GET",
    path: "/holds",
    query: ["entity_id", "status", "limit", "cursor"],
    async handle({ query, programId, call }, { hold }) {
      const res = await hold.listHolds(
        {
          programId,
          entityId: requiredParam(query, "entity_id"),
          status: enumParam(HoldStatusSchema, optionalParam(query, "status"), "status"),
          limit: limitParam(query),
          cursor: optionalParam(query, "cursor"),
        },
        call,
      );
      return { holds: res.holds.map(renderHold), pagination: renderPage(res.page) };
    },
  },
];
