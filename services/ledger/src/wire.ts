/**
 * A protobuf writer for the few wire types our hand-written encoders use (events.ts,
 * batch-response.ts), into one buffer that each owner reuses for every message: protobuf-es's
 * reflective encoder was the largest part of a batch call's CPU
 * (docs/decisions/hand-written-batch-answers.md, docs/decisions/hand-written-event-encoder.md).
 */
export class Writer {
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

  /** Bytes written so far: where the next field starts. */
  get length(): number {
    return this.pos;
  }

  /** An int32 or enum as protobuf writes it (a negative one takes ten bytes, as int64); 0 is left out. */
  int32(field: number, value: number): void {
    if (value === 0) return;
    if (value < 0) {
      this.int64(field, BigInt(value));
      return;
    }
    this.varint(field << 3);
    this.room(5);
    this.varintUnsigned(value);
  }

  /** Bytes already encoded, as they are. */
  raw(bytes: Uint8Array): void {
    this.room(bytes.length);
    this.buf.set(bytes, this.pos);
    this.pos += bytes.length;
  }

  /** Starts the length of a length-delimited value whose tag someone else writes; ends with `close`. */
  openLength(): number {
    this.room(1);
    return this.pos++;
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
