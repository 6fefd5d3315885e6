import { create, type MessageInitShape, type MessageShape } from "@bufbuild/protobuf";
import { WireType } from "@bufbuild/protobuf/wire";
import type { Timestamp } from "@bufbuild/protobuf/wkt";
import { ConnectError, type HandlerContext } from "@connectrpc/connect";
import { encodeBinary } from "@ledger/common";
import {
  CreateTransactionsResponseSchema,
  CreateTransactionsResultSchema,
  type CreateTransactionResponse,
  type TransactionGroup,
} from "@ledger/proto/ledger/v1/ledger_pb.js";
import { itemError, type ItemAnswer } from "./batch-units.js";
import { Writer } from "./wire.js";

const RESULTS_FIELD = 3;
const resultsWriter = new Writer();

/**
 * Whether the caller reads the answer as JSON: Connect's `application/json`, gRPC's and
 * gRPC-Web's `+json`. A call without a content type is one of our in-memory calls, in binary.
 */
export function answersInJson(ctx: HandlerContext): boolean {
  return /[/+]json\b/i.test(ctx.requestHeader.get("content-type") ?? "");
}

/** One item's result: its group (and whether it was replayed), or why it was refused. */
function itemResult(answer: ItemAnswer): MessageInitShape<typeof CreateTransactionsResultSchema> {
  if (answer instanceof ConnectError) return { result: { case: "error", value: itemError(answer) } };
  const group = (answer.response as CreateTransactionResponse).transactionGroup!;
  return { result: { case: "transactionGroup", value: group }, replayed: answer.replayed };
}

/**
 * The answer of a batch call as protobuf-es builds it: `succeeded`, `failed`, and one result per
 * item in request order. For callers that read JSON (`answersInJson`): protobuf-es's JSON writer
 * leaves out unknown fields, so `batchResponse`'s results would not reach them.
 */
export function batchMessage(answers: ItemAnswer[]): MessageShape<typeof CreateTransactionsResponseSchema> {
  const results = answers.map(itemResult);
  const failed = answers.filter((answer) => answer instanceof ConnectError).length;
  return create(CreateTransactionsResponseSchema, { succeeded: answers.length - failed, failed, results });
}

/**
 * The answer of a batch call for callers that read binary protobuf: the same message as
 * `batchMessage`, with its results written ahead.
 *
 * The results are written by hand straight from each item's `TransactionGroup` (protobuf-es's
 * reflective encoder took more of a 100-item answer than the rules and the database write
 * together; docs/decisions/hand-written-batch-answers.md) and handed to Connect as the message's
 * unknown fields: each is field 3 with the bytes protobuf-es would write for that result, in
 * order, and protobuf-es writes unknown fields after the known ones, so the whole answer is byte
 * for byte the one `toBinary(CreateTransactionsResponseSchema, ...)` writes for the same results
 * (batch-response.test.ts checks it on random groups). A reader decodes them as `results`; a JSON
 * writer drops them, hence `batchMessage`. An error, and a group with metadata (a `Struct`), are
 * built as messages and written by `encodeBinary`.
 */
export function batchResponse(answers: ItemAnswer[]): MessageShape<typeof CreateTransactionsResponseSchema> {
  const w = resultsWriter;
  w.reset();
  const bounds: number[] = [];
  let failed = 0;
  for (const answer of answers) {
    const start = w.length;
    const at = w.openLength();
    if (answer instanceof ConnectError) {
      failed++;
      w.raw(encodeBinary(CreateTransactionsResultSchema, create(CreateTransactionsResultSchema, itemResult(answer))));
    } else {
      const group = (answer.response as CreateTransactionResponse).transactionGroup!;
      if (group.metadata) {
        w.raw(encodeBinary(CreateTransactionsResultSchema, create(CreateTransactionsResultSchema, itemResult(answer))));
      } else {
        const g = w.open(1);
        writeGroup(w, group);
        w.close(g);
        w.bool(3, answer.replayed);
      }
    }
    w.close(at);
    bounds.push(start, w.length);
  }
  const bytes = w.take();
  const response = create(CreateTransactionsResponseSchema, { succeeded: answers.length - failed, failed });
  response.$unknown = [];
  for (let i = 0; i < bounds.length; i += 2) {
    response.$unknown.push({ no: RESULTS_FIELD, wireType: WireType.LengthDelimited, data: bytes.subarray(bounds[i], bounds[i + 1]) });
  }
  return response;
}

/** A `TransactionGroup` without metadata, fields in number order, empty ones left out. */
function writeGroup(w: Writer, g: TransactionGroup): void {
  w.string(1, g.transactionGroupId);
  w.string(2, g.programId);
  w.int32(3, g.status);
  w.string(4, g.description);
  w.string(6, g.currencyCode);
  w.bool(7, g.disputed);
  w.int64(8, g.amount);
  for (const leg of g.legs) {
    const at = w.open(9);
    w.string(1, leg.transactionId);
    w.string(2, leg.transactionGroupId);
    w.string(3, leg.entityId);
    w.int32(4, leg.direction);
    w.int64(5, leg.amount);
    w.int32(6, leg.status);
    writeTimestamp(w, 7, leg.createdAt);
    w.close(at);
  }
  writeTimestamp(w, 10, g.createdAt);
  writeTimestamp(w, 11, g.updatedAt);
  w.string(12, g.reversesTransactionGroupId);
  w.string(13, g.reversedByTransactionGroupId);
  w.string(14, g.reason);
}

function writeTimestamp(w: Writer, field: number, ts: Timestamp | undefined): void {
  if (!ts) return;
  const at = w.open(field);
  w.int64(1, ts.seconds);
  w.int32(2, ts.nanos);
  w.close(at);
}
