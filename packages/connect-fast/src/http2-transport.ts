// Unary Connect calls to a service at a URL, over node:http2 without Connect-ES's per-call layers.
// Why: docs/decisions/lean-http2-client.md.
import * as http2 from "node:http2";
import { fromBinary, toBinary, type DescMessage, type DescMethodUnary, type MessageShape } from "@bufbuild/protobuf";
import {
  appendHeaders,
  Code,
  ConnectError,
  type Interceptor,
  type Transport,
  type UnaryRequest,
  type UnaryResponse,
} from "@connectrpc/connect";
import { createConnectTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { errorFromJsonBytes, requestHeader, trailerDemux, validateResponseWithCompression } from "@connectrpc/connect/protocol-connect";
import { runCallerUnary } from "./caller.js";
import { unaryFastPathEnabled } from "./switch.js";

/** What `createHttp2Transport` needs. */
export interface Http2TransportOptions {
  /** The service's base URL (`http://ledger:8081`). */
  baseUrl: string;
  /** The caller's own interceptors (its tracing), run around each call as Connect runs them. */
  interceptors: Interceptor[];
  /** A PING this often keeps an idle connection known alive (Connect's `pingIntervalMs`). */
  pingIntervalMs: number;
  /** An answer larger than this is refused (resource_exhausted) instead of being read whole. */
  readMaxBytes: number;
  /** Unary calls go the lean way; unset, RPC_UNARY_FAST_PATH decides (`unaryFastPathEnabled`). */
  unaryFastPath?: boolean | undefined;
}

/**
 * Connect's unary protocol with binary protobuf over one kept-alive HTTP/2 connection, as
 * `createConnectTransport` speaks it, without its per-call layers: a deadline signal and a second
 * abort controller linked to it, the request body as an async iterable, the answer read through
 * another, and the headers converted twice. Those were most of the gateway's CPU per call when the
 * services run apart (docs/decisions/lean-http2-client.md).
 *
 * Everything a caller sees stays Connect's: the same request headers (`connect-timeout-ms` for a
 * deadline), the caller's interceptors around each call with the same request and response
 * objects, the answer's headers and its `trailer-` headers as trailers (`trailerDemux`), a refusal
 * read from its error JSON with the headers as metadata (`errorFromJsonBytes`), a status without
 * one turned into a code as Connect turns it (`validateResponseWithCompression`), and the caller's
 * deadline and signal ending the call with deadline_exceeded or canceled and resetting its stream.
 * A lost or refused connection is unavailable, as Connect maps it. The connection itself is
 * Connect's `Http2SessionManager` (connecting, PING keep-alive, reconnecting after GOAWAY), shared
 * with the Connect transport that carries the streaming calls. `http2-transport.test.ts` holds the
 * two transports to the same outcomes.
 *
 * Off (`unaryFastPath` false, or RPC_UNARY_FAST_PATH=false), it is Connect's `createConnectTransport`
 * alone, with the same settings, for every call.
 */
export function createHttp2Transport(options: Http2TransportOptions): Transport {
  const sessions = new Http2SessionManager(options.baseUrl, { pingIntervalMs: options.pingIntervalMs });
  const connect = createConnectTransport({
    baseUrl: options.baseUrl,
    httpVersion: "2",
    useBinaryFormat: true,
    interceptors: options.interceptors,
    // Not compressed: between our own services gzip only costs CPU on both ends
    // (docs/decisions/no-gzip-between-services.md).
    acceptCompression: [],
    readMaxBytes: options.readMaxBytes,
    sessionManager: sessions,
  });
  if (!(options.unaryFastPath ?? unaryFastPathEnabled())) return connect;
  const { origin, pathname } = new URL(options.baseUrl);
  const basePath = pathname.replace(/\/+$/, "");

  return {
    unary(method, signal, timeoutMs, header, input, contextValues) {
      // As Connect: no timeout, or one of zero or less, is no deadline.
      const deadline = timeoutMs === undefined || timeoutMs <= 0 ? undefined : timeoutMs;
      const path = `${basePath}/${method.parent.typeName}/${method.name}`;
      const exchange = new Exchange(sessions, method, path, options.readMaxBytes);
      return runCallerUnary(options.interceptors, (req) => exchange.send(req), {
        method,
        url: `${origin}${path}`,
        // Connect's own request headers: content type, protocol version, connect-timeout-ms.
        header: requestHeader("unary", true, deadline, header, false),
        input,
        contextValues,
        signal,
        timeoutMs: deadline,
        onEnd: (reason) => exchange.cancel(reason),
      }) as never;
    },
    stream: (...args) => connect.stream(...args),
  };
}

/** One call's HTTP/2 stream: sent once the interceptors pass the request on, reset if the caller ends the call first. */
class Exchange<I extends DescMessage, O extends DescMessage> {
  private stream: http2.ClientHttp2Stream | undefined;
  private ended: ConnectError | undefined;

  constructor(
    private readonly sessions: Http2SessionManager,
    private readonly method: DescMethodUnary<I, O>,
    private readonly path: string,
    private readonly readMaxBytes: number,
  ) {}

  /** The caller's deadline or signal ended the call: its stream, if any, is reset with CANCEL. */
  cancel(reason: ConnectError): void {
    if (this.ended) return;
    this.ended = reason;
    if (this.stream && !this.stream.closed) this.stream.close(http2.constants.NGHTTP2_CANCEL);
  }

  async send(req: UnaryRequest): Promise<UnaryResponse> {
    const body = toBinary(this.method.input, req.message as MessageShape<I>);
    const headers: http2.OutgoingHttpHeaders = {};
    req.header.forEach((value, name) => {
      headers[name] = value;
    });
    const { status, raw, bytes } = await this.exchange(headers, body);
    const { isUnaryError, unaryError } = validateResponseWithCompression("unary", [], true, status, raw);
    const [header, trailer] = trailerDemux(raw);
    if (isUnaryError) throw errorFromJsonBytes(bytes, appendHeaders(header, trailer), unaryError!);
    let message: MessageShape<O>;
    try {
      message = fromBinary(this.method.output, bytes);
    } catch (e) {
      throw new ConnectError(`parse binary: ${e instanceof Error ? e.message : String(e)}`, Code.Internal);
    }
    return { stream: false, service: this.method.parent, method: this.method, header, trailer, message } as UnaryResponse;
  }

  /**
   * Sends the request on a stream and reads its answer. A stream the service refused unprocessed
   * (REFUSED_STREAM, which HTTP/2 says is safe to send again) goes once more, on the connection the
   * session manager has by then: that is how a call ends that set out as the service closed its
   * idle connection (the GOAWAY crossed it), and the manager opens a new connection after a GOAWAY.
   */
  private async exchange(
    headers: http2.OutgoingHttpHeaders,
    body: Uint8Array,
  ): Promise<{ status: number; raw: Headers; bytes: Uint8Array }> {
    for (let attempt = 1; ; attempt++) {
      // The caller's signal was aborted before the call: nothing goes out.
      if (this.ended) throw this.ended;
      let stream: http2.ClientHttp2Stream;
      try {
        stream = await this.sessions.request("POST", this.path, headers, {});
      } catch (e) {
        throw fromNodeReason(e);
      }
      if (this.ended) {
        stream.close(http2.constants.NGHTTP2_CANCEL);
        throw this.ended;
      }
      this.stream = stream;
      try {
        return await this.read(stream, body);
      } catch (e) {
        if (attempt > 1 || this.ended || stream.rstCode !== http2.constants.NGHTTP2_REFUSED_STREAM) throw e;
      }
    }
  }

  /** Writes the body and reads the whole answer: its status, its headers, its bytes up to `readMaxBytes`. */
  private read(stream: http2.ClientHttp2Stream, body: Uint8Array): Promise<{ status: number; raw: Headers; bytes: Uint8Array }> {
    return new Promise((resolve, reject) => {
      let status = 0;
      const raw = new Headers();
      const chunks: Buffer[] = [];
      let size = 0;
      let settled = false;
      const fail = (error: ConnectError) => {
        if (settled) return;
        settled = true;
        if (!stream.closed) stream.close(http2.constants.NGHTTP2_CANCEL);
        reject(error);
      };
      stream.on("response", (headers) => {
        status = Number(headers[":status"]);
        for (const name in headers) {
          const value = headers[name];
          if (name.charCodeAt(0) === 58 /* ":" */ || value === undefined) continue;
          if (Array.isArray(value)) for (const v of value) raw.append(name, v);
          else raw.append(name, String(value));
        }
      });
      stream.on("data", (chunk: Buffer) => {
        size += chunk.byteLength;
        if (size > this.readMaxBytes) {
          return fail(new ConnectError(`message size is larger than configured readMaxBytes ${this.readMaxBytes}`, Code.ResourceExhausted));
        }
        chunks.push(chunk);
        this.sessions.notifyResponseByteRead(stream);
      });
      stream.on("end", () => {
        // Ended without an answer: node ends a stream so when its connection is lost.
        if (status === 0) return fail(this.ended ?? lostStream(stream));
        if (settled) return;
        settled = true;
        resolve({ status, raw, bytes: chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks) });
      });
      stream.on("error", (e: unknown) => {
        // The server answered and ended the stream while the body was still going out: its answer
        // counts, not the failed write (as connect-node's client has it).
        if (stream.writableEnded && (e as NodeJS.ErrnoException).code === "ERR_STREAM_WRITE_AFTER_END") return;
        fail(this.ended ?? fromResetCode(stream.rstCode) ?? fromNodeReason(e));
      });
      stream.on("close", () => fail(this.ended ?? lostStream(stream)));
      stream.end(body);
    });
  }
}

/**
 * Why a stream closed without its answer. A lost connection is unavailable, as a connection that
 * cannot be had is: node closes its streams with CANCEL then, which is no caller's cancellation.
 * A stream the server reset is what its code says.
 */
function lostStream(stream: http2.ClientHttp2Stream): ConnectError {
  if (stream.session?.destroyed || stream.session?.closed || stream.session === undefined) {
    return new ConnectError("the connection to the service was lost before its answer", Code.Unavailable);
  }
  return fromResetCode(stream.rstCode) ?? new ConnectError("the stream closed before its answer", Code.Unavailable);
}

/** A reset stream's code as connect-node maps it (PROTOCOL-HTTP2.md of gRPC); undefined for none or NO_ERROR. */
function fromResetCode(rstCode: number | undefined): ConnectError | undefined {
  const c = http2.constants;
  const code = ((): Code | undefined => {
    switch (rstCode) {
      case c.NGHTTP2_PROTOCOL_ERROR:
      case c.NGHTTP2_INTERNAL_ERROR:
      case c.NGHTTP2_FLOW_CONTROL_ERROR:
      case c.NGHTTP2_SETTINGS_TIMEOUT:
      case c.NGHTTP2_FRAME_SIZE_ERROR:
      case c.NGHTTP2_COMPRESSION_ERROR:
      case c.NGHTTP2_CONNECT_ERROR:
        return Code.Internal;
      case c.NGHTTP2_REFUSED_STREAM:
        return Code.Unavailable;
      case c.NGHTTP2_CANCEL:
        return Code.Canceled;
      case c.NGHTTP2_ENHANCE_YOUR_CALM:
        return Code.ResourceExhausted;
      case c.NGHTTP2_INADEQUATE_SECURITY:
      case c.NGHTTP2_HTTP_1_1_REQUIRED:
        return Code.PermissionDenied;
      default:
        return undefined;
    }
  })();
  return code === undefined ? undefined : new ConnectError(`http/2 stream closed with error code 0x${rstCode!.toString(16)}`, code);
}

/** A failure of node's as connect-node maps it: a connection that cannot be had is unavailable. */
function fromNodeReason(reason: unknown): ConnectError {
  if (reason instanceof ConnectError) return reason;
  const codes = new Set<string>();
  for (let e: unknown = reason, depth = 0; e instanceof Error && depth < 8; e = e.cause, depth++) {
    const code = (e as NodeJS.ErrnoException).code;
    if (typeof code === "string") codes.add(code);
  }
  let code = Code.Internal;
  if (codes.has("ERR_STREAM_DESTROYED") || codes.has("ERR_HTTP2_INVALID_STREAM") || codes.has("ECONNRESET")) code = Code.Aborted;
  else if (["ETIMEDOUT", "ENOTFOUND", "EAI_AGAIN", "ECONNREFUSED"].some((c) => codes.has(c))) code = Code.Unavailable;
  const error = ConnectError.from(reason, code);
  if (error !== reason) error.cause = reason;
  return error;
}
