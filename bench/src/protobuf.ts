// `pnpm bench:protobuf`: encodeBinary and decodeBinary against protobuf-es's toBinary and
// fromBinary, in this one process, on the messages the services encode and decode per request.
// Each pair runs in alternating rounds, and the tables give each one's median time per message and
// the ratio (docs/decisions/proto-binary-codec.md). No database or NATS is needed.
import { create, type DescMessage, fromBinary, type JsonObject, toBinary } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { decodeBinary, encodeBinary } from "@ledger/common";
import { EventSchema } from "@ledger/proto/events/v1/events_pb.js";
import {
  CreateTransactionRequestSchema,
  CreateTransactionResponseSchema,
  CreateTransactionsResponseSchema,
  TransactionGroupSchema,
} from "@ledger/proto/ledger/v1/ledger_pb.js";

const ROUNDS = 7;
const ROUND_MS = 300;

const now = timestampFromDate(new Date("2026-11-25T10:00:00Z"));
function group(i: number, metadata?: JsonObject) {
  const id = `trx-grp_01JCZ6Y0Q4M8E3K${String(i).padStart(11, "0")}`;
  return create(TransactionGroupSchema, {
    transactionGroupId: id,
    programId: "prg_01JCZ6Y0Q4M8E3K0000000001",
    status: 2,
    description: "order 4711",
    metadata,
    currencyCode: "USD",
    amount: 12_345n,
    createdAt: now,
    updatedAt: now,
    legs: [1, 2].map((direction) => ({
      transactionId: `trx_01JCZ6Y0Q4M8E3K${String(i * 2 + direction).padStart(11, "0")}`,
      transactionGroupId: id,
      entityId: `ent_01JCZ6Y0Q4M8E3K0000000000${direction}`,
      direction,
      amount: 12_345n,
      status: 2,
      createdAt: now,
    })),
  });
}

const cases: [string, DescMessage, unknown][] = [
  ["transfer answer (two legs)", CreateTransactionResponseSchema, create(CreateTransactionResponseSchema, { transactionGroup: group(1) })],
  [
    "transfer answer with metadata",
    CreateTransactionResponseSchema,
    create(CreateTransactionResponseSchema, { transactionGroup: group(2, { order_id: "4711", attempt: 2, tags: ["a", "b"], vip: true }) }),
  ],
  [
    "transfer request (idempotency fingerprint)",
    CreateTransactionRequestSchema,
    create(CreateTransactionRequestSchema, {
      programId: "prg_01JCZ6Y0Q4M8E3K0000000001",
      description: "order 4711",
      status: 2,
      form: {
        case: "transfer",
        value: { fromEntityId: "ent_01JCZ6Y0Q4M8E3K00000000001", toEntityId: "ent_01JCZ6Y0Q4M8E3K00000000002", amount: 12_345n },
      },
    }),
  ],
  [
    "batch answer, 100 groups",
    CreateTransactionsResponseSchema,
    create(CreateTransactionsResponseSchema, {
      succeeded: 100,
      results: Array.from({ length: 100 }, (_, i) => ({ result: { case: "transactionGroup" as const, value: group(i) } })),
    }),
  ],
];

/** Nanoseconds per call of `fn`, run for about `ms`. */
function time(fn: () => unknown, ms: number): number {
  let n = 0;
  const start = process.hrtime.bigint();
  const end = start + BigInt(ms) * 1_000_000n;
  let t = start;
  while (t < end) {
    for (let i = 0; i < 100; i++) fn();
    n += 100;
    t = process.hrtime.bigint();
  }
  return Number(t - start) / n;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/** Median µs per call of each of `reference` and `ours`, timed in alternating rounds. */
function compare(reference: () => unknown, ours: () => unknown): [number, number] {
  const a: number[] = [];
  const b: number[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    a.push(time(reference, ROUND_MS));
    b.push(time(ours, ROUND_MS));
  }
  return [median(a) / 1000, median(b) / 1000];
}

const event = create(EventSchema, {
  id: "evt_01JCZ6Y0Q4M8E3K00000000001",
  type: "transaction.created",
  accountId: "acc_01JCZ6Y0Q4M8E3K00000000001",
  programId: "prg_01JCZ6Y0Q4M8E3K0000000001",
  created: now,
  requestId: "req_01JCZ6Y0Q4M8E3K00000000001",
  data: {
    case: "transaction",
    value: {
      transactionGroupId: "trx-grp_01JCZ6Y0Q4M8E3K00000000001",
      programId: "prg_01JCZ6Y0Q4M8E3K0000000001",
      amount: 12_345n,
      currencyCode: "USD",
      description: "order 4711",
      transactionStatus: 2,
      legs: [1, 2].map((direction) => ({
        transactionId: `trx_01JCZ6Y0Q4M8E3K0000000000${direction}`,
        entityId: `ent_01JCZ6Y0Q4M8E3K0000000000${direction}`,
        amount: 12_345n,
        legDirection: direction,
      })),
    },
  },
});
cases.push(["transaction event", EventSchema, event]);

console.log(`Node ${process.version}, ${ROUNDS} alternating rounds of ${ROUND_MS} ms per function and message\n`);
console.log("| message | bytes | toBinary µs | encodeBinary µs | ratio | fromBinary µs | decodeBinary µs | ratio |");
console.log("|---|---:|---:|---:|---:|---:|---:|---:|");
for (const [name, schema, message] of cases) {
  const bytes = toBinary(schema, message as never);
  if (Buffer.compare(Buffer.from(bytes), Buffer.from(encodeBinary(schema, message as never))) !== 0)
    throw new Error(`${name}: the encoders disagree`);
  const [encodeA, encodeB] = compare(
    () => toBinary(schema, message as never),
    () => encodeBinary(schema, message as never),
  );
  const [decodeA, decodeB] = compare(
    () => fromBinary(schema, bytes),
    () => decodeBinary(schema, bytes),
  );
  const cell = (a: number, b: number) => `${a.toFixed(2)} | ${b.toFixed(2)} | ${(a / b).toFixed(1)}x`;
  console.log(`| ${name} | ${bytes.byteLength} | ${cell(encodeA, encodeB)} | ${cell(decodeA, decodeB)} |`);
}
