import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { BinaryReader, WireType } from "@bufbuild/protobuf/wire";
import { EmptySchema, type Timestamp } from "@bufbuild/protobuf/wkt";
import type { CallOptions, Transport } from "@connectrpc/connect";
import { decodeBinary } from "@ledger/common";
import {
  CreateTransactionsRequestSchema,
  CreateTransactionsResultSchema,
  LedgerService,
  type CreateTransactionsResult,
  type Leg,
  type TransactionGroup,
} from "@ledger/proto/ledger/v1/ledger_pb.js";

/** A batch call's answer, as `CreateTransactionsResponse` holds it. */
export interface BatchAnswer {
  succeeded: number;
  failed: number;
  results: CreateTransactionsResult[];
}

/** `LedgerService.CreateTransactions`, answered as a `BatchAnswer`. */
export type CreateTransactionsCall = (
  request: MessageInitShape<typeof CreateTransactionsRequestSchema>,
  call: CallOptions,
) => Promise<BatchAnswer>;

// The same method, with an answer protobuf-es leaves undecoded: `Empty` has no fields, so every
// field of the answer arrives as raw bytes in `$unknown`, for `readAnswer`.
const rawMethod = Object.assign({}, LedgerService.method.createTransactions, { output: EmptySchema });

/**
 * Calls CreateTransactions and reads its answer without protobuf-es's reflective decoder, which
 * was most of the gateway's CPU for a 100-item answer (docs/decisions/gateway-batch-answer-reader.md):
 * the results are read with the wire reader straight into messages. The call itself (path, headers, interceptors,
 * errors) is the transport's, exactly as a generated client makes it.
 */
export function createTransactionsCall(transport: Transport): CreateTransactionsCall {
  return async (request, call) => {
    const res = await transport.unary(
      rawMethod as unknown as typeof LedgerService.method.createTransactions,
      call.signal,
      call.timeoutMs,
      call.headers,
      create(CreateTransactionsRequestSchema, request),
      call.contextValues,
    );
    call.onHeader?.(res.header);
    call.onTrailer?.(res.trailer);
    return readAnswer(res.message.$unknown ?? []);
  };
}

/**
 * The answer from its fields as raw bytes (field number, wire type, and for a length-delimited
 * field its length and bytes). A result with an error or with metadata (a `Struct`) is read by
 * `decodeBinary`; every other one by `readGroup`. gateway/src/batch-answer.test.ts holds the result
 * to `fromBinary` on random answers.
 */
export function readAnswer(fields: ReadonlyArray<{ no: number; wireType: WireType; data: Uint8Array }>): BatchAnswer {
  const answer: BatchAnswer = { succeeded: 0, failed: 0, results: [] };
  for (const { no, wireType, data } of fields) {
    const reader = new BinaryReader(data);
    if (no === 1 && wireType === WireType.Varint) answer.succeeded = reader.int32();
    else if (no === 2 && wireType === WireType.Varint) answer.failed = reader.int32();
    else if (no === 3 && wireType === WireType.LengthDelimited) answer.results.push(readResult(reader.bytes()));
  }
  return answer;
}

function readResult(bytes: Uint8Array): CreateTransactionsResult {
  return readGroupResult(bytes) ?? decodeBinary(CreateTransactionsResultSchema, bytes);
}

/** A result that holds a group, or undefined for any other (an error) and for a group `readGroup` leaves to protobuf-es. */
function readGroupResult(bytes: Uint8Array): CreateTransactionsResult | undefined {
  const reader = new BinaryReader(bytes);
  let group: TransactionGroup | undefined;
  let replayed = false;
  while (reader.pos < reader.len) {
    const [no, wireType] = reader.tag();
    if (no === 1 && wireType === WireType.LengthDelimited) {
      group = readGroup(reader.bytes());
      if (!group) return undefined;
    } else if (no === 3 && wireType === WireType.Varint) replayed = reader.bool();
    else return undefined;
  }
  return group && { $typeName: "ledger.v1.CreateTransactionsResult", result: { case: "transactionGroup", value: group }, replayed };
}

/** A group, or undefined when it holds what this reader leaves to protobuf-es (metadata, an unknown field). */
function readGroup(bytes: Uint8Array): TransactionGroup | undefined {
  const reader = new BinaryReader(bytes);
  const group: TransactionGroup = {
    $typeName: "ledger.v1.TransactionGroup",
    transactionGroupId: "",
    programId: "",
    status: 0,
    description: "",
    currencyCode: "",
    disputed: false,
    amount: 0n,
    legs: [],
    reversesTransactionGroupId: "",
    reversedByTransactionGroupId: "",
    reason: "",
  };
  while (reader.pos < reader.len) {
    const [no, wireType] = reader.tag();
    const delimited = wireType === WireType.LengthDelimited;
    const varint = wireType === WireType.Varint;
    if (no === 1 && delimited) group.transactionGroupId = reader.string();
    else if (no === 2 && delimited) group.programId = reader.string();
    else if (no === 3 && varint) group.status = reader.int32();
    else if (no === 4 && delimited) group.description = reader.string();
    else if (no === 6 && delimited) group.currencyCode = reader.string();
    else if (no === 7 && varint) group.disputed = reader.bool();
    else if (no === 8 && varint) group.amount = BigInt(reader.int64());
    else if (no === 9 && delimited) {
      const leg = readLeg(reader.bytes());
      if (!leg) return undefined;
      group.legs.push(leg);
    } else if ((no === 10 || no === 11) && delimited) {
      const ts = readTimestamp(reader.bytes());
      if (!ts) return undefined;
      if (no === 10) group.createdAt = ts;
      else group.updatedAt = ts;
    } else if (no === 12 && delimited) group.reversesTransactionGroupId = reader.string();
    else if (no === 13 && delimited) group.reversedByTransactionGroupId = reader.string();
    else if (no === 14 && delimited) group.reason = reader.string();
    else return undefined;
  }
  return group;
}

function readLeg(bytes: Uint8Array): Leg | undefined {
  const reader = new BinaryReader(bytes);
  const leg: Leg = {
    $typeName: "ledger.v1.Leg",
    transactionId: "",
    transactionGroupId: "",
    entityId: "",
    direction: 0,
    amount: 0n,
    status: 0,
  };
  while (reader.pos < reader.len) {
    const [no, wireType] = reader.tag();
    const delimited = wireType === WireType.LengthDelimited;
    const varint = wireType === WireType.Varint;
    if (no === 1 && delimited) leg.transactionId = reader.string();
    else if (no === 2 && delimited) leg.transactionGroupId = reader.string();
    else if (no === 3 && delimited) leg.entityId = reader.string();
    else if (no === 4 && varint) leg.direction = reader.int32();
    else if (no === 5 && varint) leg.amount = BigInt(reader.int64());
    else if (no === 6 && varint) leg.status = reader.int32();
    else if (no === 7 && delimited) {
      const ts = readTimestamp(reader.bytes());
      if (!ts) return undefined;
      leg.createdAt = ts;
    } else return undefined;
  }
  return leg;
}

function readTimestamp(bytes: Uint8Array): Timestamp | undefined {
  const reader = new BinaryReader(bytes);
  const ts: Timestamp = { $typeName: "google.protobuf.Timestamp", seconds: 0n, nanos: 0 };
  while (reader.pos < reader.len) {
    const [no, wireType] = reader.tag();
    if (no === 1 && wireType === WireType.Varint) ts.seconds = BigInt(reader.int64());
    else if (no === 2 && wireType === WireType.Varint) ts.nanos = reader.int32();
    else return undefined;
  }
  return ts;
}
