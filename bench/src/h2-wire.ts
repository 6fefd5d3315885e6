// A minimal HTTP/2 client for the load generator: unary POSTs over one cleartext connection, framed
// by hand. node:http2's client spent about a third of the generator's CPU per call (a Duplex stream,
// header objects, listeners and an async resource per request); the generator shares the machine
// with the system it measures, as pgbench's C client does, so what it spends is taken from the
// system. bench/README.md, "The load generator's HTTP by hand", has the numbers.
//
// What it does and no more (RFC 9113, RFC 7541):
// - asks the server for no dynamic HPACK table (SETTINGS_HEADER_TABLE_SIZE 0), so an answer's
//   headers can be read without keeping decoder state, and reads only `:status` (always the first
//   field of an answer), from the static table or a literal, Huffman-coded or not;
// - grants the largest receive windows at the start and tops the connection's up as answers arrive;
// - honours the server's send windows and frame size, queueing a body until WINDOW_UPDATE allows it;
// - answers PING and SETTINGS, fails what GOAWAY or RST_STREAM ends, and fails a call not answered
//   within its timeout (one sweep a second, not a timer per call).
import { connect, type Socket } from "node:net";

/** An answer: its HTTP status and its body. */
export interface H2Answer {
  status: number;
  body: Buffer;
}

/** Why a call failed before it was answered: the transport's words, counted as such by the bench. */
export class H2CallError extends Error {
  constructor(readonly code: "network" | "timeout" | "reset" | "protocol") {
    super(code);
  }
}

const FRAME_DATA = 0x0;
const FRAME_HEADERS = 0x1;
const FRAME_RST_STREAM = 0x3;
const FRAME_SETTINGS = 0x4;
const FRAME_PING = 0x6;
const FRAME_GOAWAY = 0x7;
const FRAME_WINDOW_UPDATE = 0x8;
const FRAME_CONTINUATION = 0x9;

const FLAG_END_STREAM = 0x1;
const FLAG_ACK = 0x1;
const FLAG_END_HEADERS = 0x4;
const FLAG_PADDED = 0x8;
const FLAG_PRIORITY = 0x20;

const SETTINGS_HEADER_TABLE_SIZE = 0x1;
const SETTINGS_ENABLE_PUSH = 0x2;
const SETTINGS_INITIAL_WINDOW_SIZE = 0x4;
const SETTINGS_MAX_FRAME_SIZE = 0x5;

const MAX_WINDOW = 2 ** 31 - 1;
const DEFAULT_WINDOW = 65_535;
const PREFACE = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "latin1");
const EMPTY = Buffer.alloc(0);
/** RST_STREAM's payload for a call we give up on: the error code CANCEL (0x8). */
const CANCEL = uint32(0x8);
/** Stream ids are 31 bits: a connection this far along is replaced by a new one. */
const LAST_STREAM_ID = 2 ** 31 - 3;

interface Call {
  id: number;
  started: number;
  status: number;
  chunks: Buffer[];
  /** The part of the body still to send (flow control may hold it back). */
  unsent: Uint8Array;
  sendWindow: number;
  resolve(answer: H2Answer): void;
  reject(error: H2CallError): void;
}

/**
 * Unary calls to `host:port` over one cleartext HTTP/2 connection at a time: opened on the first
 * call, and again after a failure, a GOAWAY or the last stream id. A connection being replaced
 * finishes the calls it has.
 */
export class H2Client {
  private current: H2Session | undefined;
  private readonly sessions = new Set<H2Session>();
  private readonly sweep: NodeJS.Timeout;
  private closed = false;

  constructor(
    private readonly host: string,
    private readonly port: number,
    private readonly timeoutMs: number,
  ) {
    // One sweep a second fails the calls past their timeout: cheaper than a timer per call.
    this.sweep = setInterval(() => {
      for (const session of this.sessions) session.expire(this.timeoutMs);
    }, 1000);
    this.sweep.unref();
  }

  /** POSTs `body` with the request's header block (from `requestHeaderBlock`). */
  request(headerBlock: Uint8Array, body: Uint8Array): Promise<H2Answer> {
    if (this.closed) return Promise.reject(new H2CallError("network"));
    if (!this.current?.usable) {
      this.current?.retire();
      const session = new H2Session(this.host, this.port, () => this.sessions.delete(session));
      this.sessions.add(session);
      this.current = session;
    }
    return this.current.request(headerBlock, body);
  }

  close(): void {
    this.closed = true;
    clearInterval(this.sweep);
    for (const session of this.sessions) session.fail(new H2CallError("network"));
  }
}

/** One connection: its socket, its calls and both directions' flow control. */
class H2Session {
  private socket: Socket | undefined;
  private readonly calls = new Map<number, Call>();
  /** Calls whose body waits for a send window, in order. */
  private blocked: Call[] = [];
  private nextId = 1;
  /** Set by GOAWAY or by the client replacing this session: no new calls, and closed once idle. */
  private retiring = false;
  private connSendWindow = DEFAULT_WINDOW;
  private streamInitialWindow = DEFAULT_WINDOW;
  private maxFrameSize = 16_384;
  /** DATA bytes received since the connection's receive window was last topped up. */
  private received = 0;
  private inbox: Buffer = Buffer.alloc(0);
  /** A header block split over CONTINUATION frames: its stream and the fragments so far. */
  private continuing: { id: number; endStream: boolean; fragments: Buffer[] } | undefined;
  private out: Uint8Array[] = [];
  private flushQueued = false;

  constructor(
    host: string,
    port: number,
    private readonly onClosed: () => void,
  ) {
    const socket = connect({ host, port, noDelay: true });
    this.socket = socket;
    socket.on("data", (chunk: Buffer) => {
      try {
        this.read(chunk);
      } catch {
        this.fail(new H2CallError("protocol"));
      }
    });
    socket.on("error", () => {});
    socket.on("close", () => this.fail(new H2CallError("network")));
    const settings = Buffer.alloc(18);
    settings.writeUInt16BE(SETTINGS_HEADER_TABLE_SIZE, 0);
    settings.writeUInt32BE(0, 2);
    settings.writeUInt16BE(SETTINGS_ENABLE_PUSH, 6);
    settings.writeUInt32BE(0, 8);
    settings.writeUInt16BE(SETTINGS_INITIAL_WINDOW_SIZE, 12);
    settings.writeUInt32BE(MAX_WINDOW, 14);
    this.queue(PREFACE);
    this.queueFrame(FRAME_SETTINGS, 0, 0, settings);
    this.queueFrame(FRAME_WINDOW_UPDATE, 0, 0, uint32(MAX_WINDOW - DEFAULT_WINDOW));
  }

  get usable(): boolean {
    return this.socket !== undefined && !this.retiring && this.nextId <= LAST_STREAM_ID;
  }

  request(headerBlock: Uint8Array, body: Uint8Array): Promise<H2Answer> {
    return new Promise<H2Answer>((resolve, reject) => {
      const id = this.nextId;
      this.nextId += 2;
      const call: Call = {
        id,
        started: Date.now(),
        status: 0,
        chunks: [],
        unsent: body,
        sendWindow: this.streamInitialWindow,
        resolve,
        reject,
      };
      this.calls.set(id, call);
      this.queueFrame(FRAME_HEADERS, body.length === 0 ? FLAG_END_HEADERS | FLAG_END_STREAM : FLAG_END_HEADERS, id, headerBlock);
      if (body.length > 0) this.sendBody(call);
    });
  }

  /** No new calls; the connection closes when its last call is answered. */
  retire(): void {
    this.retiring = true;
    if (this.calls.size === 0) this.fail(new H2CallError("network"));
  }

  /** Ends the connection and every call still on it with `error`. */
  fail(error: H2CallError): void {
    const socket = this.socket;
    if (!socket) return;
    this.socket = undefined;
    this.out = [];
    this.blocked = [];
    socket.destroy();
    const calls = [...this.calls.values()];
    this.calls.clear();
    for (const call of calls) call.reject(error);
    this.onClosed();
  }

  expire(timeoutMs: number): void {
    const now = Date.now();
    for (const call of this.calls.values()) {
      if (now - call.started < timeoutMs) continue;
      this.end(call);
      this.queueFrame(FRAME_RST_STREAM, 0, call.id, CANCEL);
      call.reject(new H2CallError("timeout"));
    }
  }

  private end(call: Call): void {
    this.calls.delete(call.id);
    if (call.unsent.length > 0) this.blocked = this.blocked.filter((c) => c !== call);
    if (this.retiring && this.calls.size === 0) queueMicrotask(() => this.fail(new H2CallError("network")));
  }

  /**
   * A frame: its 9-byte header and its payload go out as they are, copied once into the tick's
   * write, not first into a frame of their own.
   */
  private queueFrame(type: number, flags: number, id: number, payload: Uint8Array): void {
    const header = Buffer.allocUnsafe(9);
    header.writeUIntBE(payload.length, 0, 3);
    header[3] = type;
    header[4] = flags;
    header.writeUInt32BE(id, 5);
    this.queue(header);
    if (payload.length > 0) this.queue(payload);
  }

  /** Bytes go out together once per tick: one write for every call the tick started. */
  private queue(bytes: Uint8Array): void {
    this.out.push(bytes);
    if (this.flushQueued) return;
    this.flushQueued = true;
    process.nextTick(() => {
      this.flushQueued = false;
      const out = this.out;
      this.out = [];
      if (out.length > 0) this.socket?.write(out.length === 1 ? out[0]! : Buffer.concat(out));
    });
  }

  /** Sends as much of `call`'s body as the windows allow; the rest waits for WINDOW_UPDATE. */
  private sendBody(call: Call): void {
    while (call.unsent.length > 0) {
      const size = Math.min(call.unsent.length, this.maxFrameSize, this.connSendWindow, call.sendWindow);
      if (size <= 0) {
        if (!this.blocked.includes(call)) this.blocked.push(call);
        return;
      }
      const chunk = call.unsent.subarray(0, size);
      call.unsent = call.unsent.subarray(size);
      this.connSendWindow -= size;
      call.sendWindow -= size;
      this.queueFrame(FRAME_DATA, call.unsent.length === 0 ? FLAG_END_STREAM : 0, call.id, chunk);
    }
  }

  private unblock(): void {
    const waiting = this.blocked;
    this.blocked = [];
    for (const call of waiting) if (this.calls.has(call.id)) this.sendBody(call);
  }

  private read(chunk: Buffer): void {
    let buf = this.inbox.length === 0 ? chunk : Buffer.concat([this.inbox, chunk]);
    let pos = 0;
    while (buf.length - pos >= 9) {
      const length = buf.readUIntBE(pos, 3);
      if (buf.length - pos < 9 + length) break;
      const type = buf[pos + 3]!;
      const flags = buf[pos + 4]!;
      const id = buf.readUInt32BE(pos + 5) & 0x7fffffff;
      const payload = buf.subarray(pos + 9, pos + 9 + length);
      pos += 9 + length;
      this.onFrame(type, flags, id, payload);
      if (!this.socket) return;
    }
    buf = buf.subarray(pos);
    // What is left is part of one frame: keep a copy, not a view that pins the whole chunk.
    this.inbox = buf.length === 0 ? Buffer.alloc(0) : Buffer.from(buf);
  }

  private onFrame(type: number, flags: number, id: number, payload: Buffer): void {
    if (this.continuing && type !== FRAME_CONTINUATION) throw new Error("a header block was interrupted");
    switch (type) {
      case FRAME_DATA: {
        this.received += payload.length;
        if (this.received > MAX_WINDOW / 2) {
          this.queueFrame(FRAME_WINDOW_UPDATE, 0, 0, uint32(this.received));
          this.received = 0;
        }
        const call = this.calls.get(id);
        if (!call) return;
        const data = flags & FLAG_PADDED ? payload.subarray(1, payload.length - payload[0]!) : payload;
        if (data.length > 0) call.chunks.push(data);
        if (flags & FLAG_END_STREAM) this.finish(call);
        return;
      }
      case FRAME_HEADERS: {
        let block = payload;
        if (flags & FLAG_PADDED) block = block.subarray(1, block.length - payload[0]!);
        if (flags & FLAG_PRIORITY) block = block.subarray(5);
        if (flags & FLAG_END_HEADERS) {
          this.onHeaders(id, block, (flags & FLAG_END_STREAM) !== 0);
          return;
        }
        this.continuing = { id, endStream: (flags & FLAG_END_STREAM) !== 0, fragments: [Buffer.from(block)] };
        return;
      }
      case FRAME_CONTINUATION: {
        const continuing = this.continuing;
        if (!continuing || continuing.id !== id) throw new Error("an unexpected CONTINUATION frame");
        continuing.fragments.push(Buffer.from(payload));
        if (flags & FLAG_END_HEADERS) {
          this.continuing = undefined;
          this.onHeaders(id, Buffer.concat(continuing.fragments), continuing.endStream);
        }
        return;
      }
      case FRAME_RST_STREAM: {
        const call = this.calls.get(id);
        if (!call) return;
        this.end(call);
        call.reject(new H2CallError("reset"));
        return;
      }
      case FRAME_SETTINGS: {
        if (flags & FLAG_ACK) return;
        for (let at = 0; at + 6 <= payload.length; at += 6) {
          const setting = payload.readUInt16BE(at);
          const value = payload.readUInt32BE(at + 2);
          if (setting === SETTINGS_INITIAL_WINDOW_SIZE) {
            // A change applies to every open stream's window by the difference (RFC 9113, 6.9.2).
            const delta = value - this.streamInitialWindow;
            this.streamInitialWindow = value;
            for (const call of this.calls.values()) call.sendWindow += delta;
          } else if (setting === SETTINGS_MAX_FRAME_SIZE) {
            this.maxFrameSize = value;
          }
        }
        this.queueFrame(FRAME_SETTINGS, FLAG_ACK, 0, EMPTY);
        this.unblock();
        return;
      }
      case FRAME_PING: {
        if (!(flags & FLAG_ACK)) this.queueFrame(FRAME_PING, FLAG_ACK, 0, Buffer.from(payload));
        return;
      }
      case FRAME_GOAWAY: {
        // Calls above the last stream the server will process were never seen by it.
        const last = payload.readUInt32BE(0) & 0x7fffffff;
        for (const call of [...this.calls.values()]) {
          if (call.id <= last) continue;
          this.end(call);
          call.reject(new H2CallError("network"));
        }
        // No new calls on this connection: the next one opens another.
        this.retiring = true;
        if (this.calls.size === 0) this.fail(new H2CallError("network"));
        return;
      }
      case FRAME_WINDOW_UPDATE: {
        const increment = payload.readUInt32BE(0) & 0x7fffffff;
        if (id === 0) this.connSendWindow += increment;
        else {
          const call = this.calls.get(id);
          if (call) call.sendWindow += increment;
        }
        this.unblock();
        return;
      }
      default:
        return; // PRIORITY, PUSH_PROMISE (refused by our settings) and unknown types carry nothing for us.
    }
  }

  private onHeaders(id: number, block: Buffer, endStream: boolean): void {
    const call = this.calls.get(id);
    if (!call) return;
    // The first header block of an answer carries `:status`; a later one is trailers.
    if (call.status === 0) {
      const status = statusOf(block);
      if (status === undefined) {
        this.end(call);
        this.queueFrame(FRAME_RST_STREAM, 0, id, CANCEL);
        call.reject(new H2CallError("protocol"));
        return;
      }
      call.status = status;
    }
    if (endStream) this.finish(call);
  }

  private finish(call: Call): void {
    this.end(call);
    call.resolve({ status: call.status, body: call.chunks.length === 1 ? call.chunks[0]! : Buffer.concat(call.chunks) });
  }
}

/**
 * The HPACK block of a POST's request headers, built once per method and reused for every call:
 * every field a literal without indexing and without Huffman coding, which any decoder accepts and
 * which leaves the server's dynamic table untouched.
 */
export function requestHeaderBlock(authority: string, path: string, headers: Record<string, string>): Buffer {
  const parts: Buffer[] = [
    Buffer.from([0x83]), // :method POST (static index 3)
    Buffer.from([0x86]), // :scheme http (static index 6)
    literal(1, authority), // :authority
    literal(4, path), // :path
  ];
  for (const [name, value] of Object.entries(headers)) parts.push(literalNewName(name.toLowerCase(), value));
  return Buffer.concat(parts);
}

/** A literal header field without indexing, its name from the static table (RFC 7541, 6.2.2). */
function literal(nameIndex: number, value: string): Buffer {
  return Buffer.concat([hpackInteger(nameIndex, 4, 0x00), hpackString(value)]);
}

/** A literal header field without indexing, with a new name. */
function literalNewName(name: string, value: string): Buffer {
  return Buffer.concat([Buffer.from([0x00]), hpackString(name), hpackString(value)]);
}

function hpackString(value: string): Buffer {
  const bytes = Buffer.from(value, "latin1");
  return Buffer.concat([hpackInteger(bytes.length, 7, 0x00), bytes]);
}

/** An HPACK integer with an `prefixBits`-bit prefix, the byte's other bits set to `high` (RFC 7541, 5.1). */
export function hpackInteger(value: number, prefixBits: number, high: number): Buffer {
  const max = (1 << prefixBits) - 1;
  if (value < max) return Buffer.from([high | value]);
  const bytes = [high | max];
  let rest = value - max;
  while (rest >= 128) {
    bytes.push((rest % 128) + 128);
    rest = Math.floor(rest / 128);
  }
  bytes.push(rest);
  return Buffer.from(bytes);
}

/** The static table's `:status` entries (RFC 7541, appendix A). */
const STATIC_STATUS: Record<number, number> = { 8: 200, 9: 204, 10: 206, 11: 304, 12: 400, 13: 404, 14: 500 };

/**
 * The `:status` of an answer's header block, or undefined if the block does not begin with one in a
 * form this reader knows. The server may not use a dynamic table (we asked for none), so the field
 * is either indexed from the static table or a literal whose name is one of its `:status` entries.
 */
export function statusOf(block: Buffer): number | undefined {
  let pos = 0;
  // Dynamic table size updates (001xxxxx) come first: ours is 0, so they say nothing.
  while (pos < block.length && (block[pos]! & 0xe0) === 0x20) pos = readInteger(block, pos, 5).next;
  if (pos >= block.length) return undefined;
  const first = block[pos]!;
  if (first & 0x80) return STATIC_STATUS[readInteger(block, pos, 7).value];
  const prefix = first & 0x40 ? 6 : 4; // with incremental indexing, or without / never indexed
  const name = readInteger(block, pos, prefix);
  if (STATIC_STATUS[name.value] === undefined) return undefined;
  pos = name.next;
  if (pos >= block.length) return undefined;
  const huffman = (block[pos]! & 0x80) !== 0;
  const length = readInteger(block, pos, 7);
  const value = block.subarray(length.next, length.next + length.value);
  if (value.length !== length.value) return undefined;
  const text = huffman ? huffmanDigits(value) : value.toString("latin1");
  if (text === undefined || !/^[1-5]\d\d$/.test(text)) return undefined;
  return Number(text);
}

function readInteger(block: Buffer, pos: number, prefixBits: number): { value: number; next: number } {
  const max = (1 << prefixBits) - 1;
  let value = block[pos]! & max;
  let next = pos + 1;
  if (value < max) return { value, next };
  let shift = 0;
  for (;;) {
    const byte = block[next++];
    if (byte === undefined || shift > 28) return { value: Number.NaN, next: block.length };
    value += (byte & 0x7f) * 2 ** shift;
    shift += 7;
    if (!(byte & 0x80)) return { value, next };
  }
}

/**
 * A Huffman-coded string of decimal digits (RFC 7541, appendix B: '0'-'2' are 00000-00010, '3'-'9'
 * are 011001-011111), or undefined for any other symbol. Padding is up to 7 one-bits.
 */
function huffmanDigits(bytes: Buffer): string | undefined {
  let bits = 0;
  let count = 0;
  let text = "";
  let i = 0;
  for (;;) {
    while (count < 6 && i < bytes.length) {
      bits = (bits << 8) | bytes[i++]!;
      count += 8;
    }
    if (count === 0) return text;
    const top5 = count >= 5 ? (bits >> (count - 5)) & 0x1f : -1;
    if (top5 >= 0 && top5 <= 2) {
      text += String(top5);
      count -= 5;
    } else if (count >= 6 && ((bits >> (count - 6)) & 0x3f) >= 0x19 && ((bits >> (count - 6)) & 0x3f) <= 0x1f) {
      text += String(((bits >> (count - 6)) & 0x3f) - 0x19 + 3);
      count -= 6;
    } else {
      // What is left must be padding: fewer than 8 bits, all ones.
      const rest = bits & ((1 << count) - 1);
      return count < 8 && i === bytes.length && rest === (1 << count) - 1 ? text : undefined;
    }
    bits &= (1 << count) - 1;
  }
}

/** A 4-byte big-endian payload: a WINDOW_UPDATE's increment or an RST_STREAM's error code. */
function uint32(value: number): Buffer {
  const payload = Buffer.alloc(4);
  payload.writeUInt32BE(value, 0);
  return payload;
}
