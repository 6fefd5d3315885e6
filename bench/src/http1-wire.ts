// A minimal keep-alive HTTP/1.1 client for the load generator's REST cells, for the same reason as
// `h2-wire.ts`: node:http's client (an agent, a ClientRequest and an IncomingMessage stream per
// call) was the largest part of the generator's CPU, and the generator shares the machine with
// the system it measures. bench/README.md, "The load generator's HTTP by hand", has the numbers.
//
// One request at a time per connection (no pipelining), up to `maxSockets` connections, each
// reused as long as the server keeps it open. Answers are read by `content-length` or chunked
// transfer coding; a call unanswered within its timeout fails (one sweep a second).
import { connect, type Socket } from "node:net";

export interface H1Answer {
  status: number;
  body: Buffer;
}

export class H1CallError extends Error {
  constructor(readonly code: "network" | "timeout" | "protocol") {
    super(code);
  }
}

interface Pending {
  head: Buffer;
  body: Buffer;
  started: number;
  resolve(answer: H1Answer): void;
  reject(error: H1CallError): void;
}

/** Answers larger than this are refused: the bench's are a few kilobytes. */
const MAX_ANSWER_BYTES = 64 * 1024 * 1024;

export class H1Client {
  private readonly idle: H1Connection[] = [];
  private readonly open = new Set<H1Connection>();
  private readonly waiting: Pending[] = [];
  private readonly sweep: NodeJS.Timeout;
  private closed = false;
  /** The header lines every request carries, `host` first, each ending in CRLF. */
  private readonly headerLines: string;

  constructor(
    private readonly host: string,
    private readonly port: number,
    private readonly maxSockets: number,
    private readonly timeoutMs: number,
    /** Header lines sent with every request, each ending in CRLF. */
    fixedHeaders: string,
  ) {
    this.headerLines = `host: ${host}:${port}\r\n${fixedHeaders}`;
    this.sweep = setInterval(() => this.expire(), 1000);
    this.sweep.unref();
  }

  request(method: string, path: string, body: Buffer): Promise<H1Answer> {
    if (this.closed) return Promise.reject(new H1CallError("network"));
    const head = Buffer.from(`${method} ${path} HTTP/1.1\r\n${this.headerLines}content-length: ${body.length}\r\n\r\n`, "latin1");
    return new Promise<H1Answer>((resolve, reject) => {
      this.waiting.push({ head, body, started: Date.now(), resolve, reject });
      this.dispatch();
    });
  }

  close(): void {
    this.closed = true;
    clearInterval(this.sweep);
    for (const connection of this.open) connection.destroy(new H1CallError("network"));
    for (const pending of this.waiting.splice(0)) pending.reject(new H1CallError("network"));
  }

  private dispatch(): void {
    while (this.waiting.length > 0) {
      let connection = this.idle.pop();
      if (!connection) {
        if (this.open.size >= this.maxSockets) return;
        connection = new H1Connection(this.host, this.port, (c, reusable) => this.release(c, reusable));
        this.open.add(connection);
      }
      connection.send(this.waiting.shift()!);
    }
  }

  private release(connection: H1Connection, reusable: boolean): void {
    if (reusable && !this.closed) this.idle.push(connection);
    else {
      this.open.delete(connection);
      const at = this.idle.indexOf(connection);
      if (at >= 0) this.idle.splice(at, 1);
    }
    this.dispatch();
  }

  private expire(): void {
    const now = Date.now();
    for (const connection of this.open) if (connection.overdue(now, this.timeoutMs)) connection.destroy(new H1CallError("timeout"));
    for (let i = this.waiting.length - 1; i >= 0; i--) {
      const pending = this.waiting[i]!;
      if (now - pending.started < this.timeoutMs) continue;
      this.waiting.splice(i, 1);
      pending.reject(new H1CallError("timeout"));
    }
  }
}

/** One socket and the call it is serving, if any. */
class H1Connection {
  private readonly socket: Socket;
  private current: Pending | undefined;
  private inbox: Buffer = Buffer.alloc(0);
  private dead = false;

  constructor(
    host: string,
    port: number,
    private readonly onFree: (connection: H1Connection, reusable: boolean) => void,
  ) {
    this.socket = connect({ host, port, noDelay: true });
    this.socket.on("data", (chunk: Buffer) => this.read(chunk));
    this.socket.on("error", () => {});
    this.socket.on("close", () => this.destroy(new H1CallError("network")));
  }

  send(pending: Pending): void {
    this.current = pending;
    this.socket.write(pending.body.length > 0 ? Buffer.concat([pending.head, pending.body]) : pending.head);
  }

  overdue(now: number, timeoutMs: number): boolean {
    return this.current !== undefined && now - this.current.started >= timeoutMs;
  }

  destroy(error: H1CallError): void {
    if (this.dead) return;
    this.dead = true;
    this.socket.destroy();
    const pending = this.current;
    this.current = undefined;
    pending?.reject(error);
    this.onFree(this, false);
  }

  private read(chunk: Buffer): void {
    this.inbox = this.inbox.length === 0 ? chunk : Buffer.concat([this.inbox, chunk]);
    if (!this.current) {
      this.destroy(new H1CallError("protocol")); // bytes nobody asked for
      return;
    }
    let parsed: { answer: H1Answer; keepAlive: boolean } | undefined;
    try {
      parsed = parseAnswer(this.inbox);
    } catch {
      this.destroy(new H1CallError("protocol"));
      return;
    }
    if (!parsed) {
      if (this.inbox.length > MAX_ANSWER_BYTES) this.destroy(new H1CallError("protocol"));
      return;
    }
    const pending = this.current;
    this.current = undefined;
    this.inbox = Buffer.alloc(0);
    pending.resolve(parsed.answer);
    if (parsed.keepAlive) this.onFree(this, true);
    else this.destroy(new H1CallError("network"));
  }
}

/**
 * A whole answer from the start of `bytes`, or undefined when more bytes are needed. Throws on an
 * answer it cannot read. Only what the bench needs: the status, the body, and whether the server
 * keeps the connection.
 */
export function parseAnswer(bytes: Buffer): { answer: H1Answer; keepAlive: boolean } | undefined {
  const end = bytes.indexOf("\r\n\r\n");
  if (end < 0) return undefined;
  const lines = bytes.toString("latin1", 0, end).split("\r\n");
  const statusLine = /^HTTP\/1\.[01] (\d{3})/.exec(lines[0] ?? "");
  if (!statusLine) throw new Error("not an HTTP/1.1 status line");
  const status = Number(statusLine[1]);
  let length: number | undefined;
  let chunked = false;
  let keepAlive = lines[0]!.startsWith("HTTP/1.1");
  for (let i = 1; i < lines.length; i++) {
    const line = lines[i]!;
    const colon = line.indexOf(":");
    const name = line.slice(0, colon).trim().toLowerCase();
    const value = line
      .slice(colon + 1)
      .trim()
      .toLowerCase();
    if (name === "content-length") length = Number(value);
    else if (name === "transfer-encoding") chunked = value.split(",").pop()?.trim() === "chunked";
    else if (name === "connection") keepAlive = !value.split(",").some((v) => v.trim() === "close");
  }
  const start = end + 4;
  if (chunked) {
    const body = dechunk(bytes, start);
    return body && { answer: { status, body }, keepAlive };
  }
  // No length and no chunking: the body is what comes before the server closes, which the bench's
  // servers never send; 204 and 304 have none.
  if (length === undefined) {
    if (status === 204 || status === 304) return { answer: { status, body: Buffer.alloc(0) }, keepAlive };
    throw new Error("an answer without a length");
  }
  if (!Number.isSafeInteger(length) || length < 0) throw new Error("a bad content-length");
  if (bytes.length < start + length) return undefined;
  return { answer: { status, body: bytes.subarray(start, start + length) }, keepAlive };
}

/** A chunked body from `start`, or undefined until its last chunk and trailers are in. */
function dechunk(bytes: Buffer, start: number): Buffer | undefined {
  const parts: Buffer[] = [];
  let pos = start;
  for (;;) {
    const lineEnd = bytes.indexOf("\r\n", pos);
    if (lineEnd < 0) return undefined;
    const size = Number.parseInt(bytes.toString("latin1", pos, lineEnd).split(";")[0]!, 16);
    if (!Number.isSafeInteger(size) || size < 0) throw new Error("a bad chunk size");
    pos = lineEnd + 2;
    if (size === 0) {
      // Trailers, if any, end with an empty line.
      const trailersEnd = bytes.indexOf("\r\n", pos);
      if (trailersEnd < 0) return undefined;
      if (trailersEnd === pos) return Buffer.concat(parts);
      const blank = bytes.indexOf("\r\n\r\n", pos);
      return blank < 0 ? undefined : Buffer.concat(parts);
    }
    if (bytes.length < pos + size + 2) return undefined;
    parts.push(bytes.subarray(pos, pos + size));
    pos += size + 2;
  }
}
