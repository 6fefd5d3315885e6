import { create, toBinary } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { newId, storedMetadata } from "@ledger/common";
import { EventSchema, type Event } from "@ledger/proto/events/v1/events_pb.js";
import type { GroupRow } from "./groups.js";

/** The transaction event types (docs/webhooks.md#how-events-become-deliveries). */
export type TransactionEventType =
  | "transaction.created"
  | "transaction.posted"
  | "transaction.reversed"
  | "transaction.failed"
  | "transaction.canceled"
  | "transaction.disputed";

/** Builds a `transaction.*` event about `group` as it is after the change, which is what receivers see. */
export function transactionEvent(type: TransactionEventType, group: GroupRow, origin: { requestId: string; traceparent: string }, at: Date): Event {
  return create(EventSchema, {
    id: newId("event"),
    type,
    accountId: group.account_id,
    programId: group.program_id,
    created: timestampFromDate(at),
    requestId: origin.requestId,
    traceparent: origin.traceparent,
    data: {
      case: "transaction",
      value: {
        transactionGroupId: group.id,
        programId: group.program_id,
        amount: group.amount,
        currencyCode: group.currency_code,
        status: group.status,
        description: group.description,
        ...(group.metadata ? { metadata: storedMetadata(group.metadata) } : {}),
        legs: group.legs.map((leg) => ({
          transactionId: leg.id,
          entityId: leg.entity_id,
          direction: leg.direction,
          amount: leg.amount,
        })),
        disputed: group.disputed,
        reversalTransactionGroupId: group.reversed_by_group_id ?? "",
        reversesTransactionGroupId: group.reverses_group_id ?? "",
        reason: group.reason,
      },
    },
  });
}

/** An event ready for the outbox: its id and type, and its `Event` message already encoded. */
export interface EncodedEvent {
  id: string;
  type: TransactionEventType;
  payload: Uint8Array;
}

/**
 * The outbox payload of `transactionEvent(type, group, origin, at)`, written straight from the
 * group without building the message: protobuf-es's reflective encoder was the largest part of a
 * batch's CPU. The bytes are the ones `toBinary(EventSchema, ...)` writes (events.test.ts checks it
 * on random groups), fields in number order, empty ones left out. A group with metadata (a
 * `Struct`) takes the reflective path, which is rare and not worth a second Struct encoder.
 */
export function encodeTransactionEvent(type: TransactionEventType, group: GroupRow, origin: { requestId: string; traceparent: string }, at: Date): EncodedEvent {
  if (group.metadata) {
    const event = transactionEvent(type, group, origin, at);
    return { id: event.id, type, payload: toBinary(EventSchema, event) };
  }
  const id = newId("event");
  const w = writer;
  w.reset();
  w.string(1, id);
  w.string(2, type);
  w.string(3, group.account_id);
  w.string(4, group.program_id);
  const ms = at.getTime();
  const created = w.open(5);
  const seconds = Math.floor(ms / 1000);
  if (seconds !== 0) w.int64(1, BigInt(seconds));
  const nanos = (ms - seconds * 1000) * 1_000_000;
  if (nanos !== 0) w.int64(2, BigInt(nanos));
  w.close(created);
  w.string(6, origin.requestId);
  w.string(7, origin.traceparent);
  const data = w.open(10);
  w.string(1, group.id);
  w.string(2, group.program_id);
  w.int64(3, group.amount);
  w.string(4, group.currency_code);
  w.string(5, group.status);
  w.string(6, group.description);
  for (const leg of group.legs) {
    const at = w.open(8);
    w.string(1, leg.id);
    w.string(2, leg.entity_id);
    w.string(3, leg.direction);
    w.int64(4, leg.amount);
    w.close(at);
  }
  if (group.disputed) w.bool(9, true);
  w.string(10, group.reversed_by_group_id ?? "");
  w.string(11, group.reverses_group_id ?? "");
  w.string(12, group.reason);
  w.close(data);
  return { id, type, payload: w.take() };
}

/** A protobuf writer for the few wire types an event uses, into one buffer reused by every call. */
class Writer {
  private buf = Buffer.allocUnsafe(4096);
  private pos = 0;

  reset(): void {
    this.pos = 0;
  }

  /** A copy of what was written. */
  take(): Uint8Array {
    return Uint8Array.prototype.slice.call(this.buf, 0, this.pos);
  }

  private room(n: number): void {
    if (this.pos + n <= this.buf.length) return;
    const bigger = Buffer.allocUnsafe(Math.max(this.buf.length * 2, this.pos + n));
    this.buf.copy(bigger, 0, 0, this.pos);
    this.buf = bigger;
  }

  private varint(n: number): void {
    this.room(5);
    while (n > 0x7f) {
      this.buf[this.pos++] = (n & 0x7f) | 0x80;
      n >>>= 7;
    }
    this.buf[this.pos++] = n;
  }

  string(field: number, value: string): void {
    if (value === "") return;
    const bytes = Buffer.byteLength(value);
    this.varint((field << 3) | 2);
    this.varint(bytes);
    this.room(bytes);
    this.pos += this.buf.write(value, this.pos, bytes, "utf8");
  }

  /** An int64 as protobuf writes it: a varint of its 64-bit two's complement; 0 is left out. */
  int64(field: number, value: bigint): void {
    if (value === 0n) return;
    this.varint(field << 3);
    this.room(10);
    if (value > 0n && value <= 0xffffffffn) {
      this.varintUnsigned(Number(value));
      return;
    }
    let v = BigInt.asUintN(64, value);
    while (v > 0x7fn) {
      this.buf[this.pos++] = Number(v & 0x7fn) | 0x80;
      v >>= 7n;
    }
    this.buf[this.pos++] = Number(v);
  }

  private varintUnsigned(n: number): void {
    while (n > 0x7f) {
      this.buf[this.pos++] = (n & 0x7f) | 0x80;
      n = Math.floor(n / 128);
    }
    this.buf[this.pos++] = n;
  }

  bool(field: number, value: boolean): void {
    if (!value) return;
    this.varint(field << 3);
    this.room(1);
    this.buf[this.pos++] = 1;
  }

  /** Starts a length-delimited field; `close` with the answer writes its length in front of it. */
  open(field: number): number {
    this.varint((field << 3) | 2);
    this.room(1);
    return this.pos++;
  }

  close(at: number): void {
    const length = this.pos - at - 1;
    let extra = 0;
    for (let n = length; n > 0x7f; n >>>= 7) extra++;
    if (extra > 0) {
      this.room(extra);
      this.buf.copyWithin(at + 1 + extra, at + 1, this.pos);
      this.pos += extra;
    }
    let n = length;
    let p = at;
    while (n > 0x7f) {
      this.buf[p++] = (n & 0x7f) | 0x80;
      n >>>= 7;
    }
    this.buf[p] = n;
  }
}

const writer = new Writer();
