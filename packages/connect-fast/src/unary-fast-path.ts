// Unary Connect calls without Connect's per-call layers, on a service's port: HTTP/2 with a
// binary body (`createUnaryFastPath`). The pieces that run a call (`unaryMethods`, `CallContext`,
// `invoke`, `parseRequest`) also serve calls in one process (in-process.ts). Why:
// docs/decisions/unary-fast-path.md; what the package is: its README.md.
import type * as http2 from "node:http2";
import { create, fromBinary, toBinary, type DescMethod, type DescService, type Message, type DescMessage } from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  createServiceImplSpec,
  type ConnectRouter,
  type ContextValues,
  type HandlerContext,
  type Interceptor,
  type MethodImplSpec,
  type UnaryRequest,
  type UnaryResponse,
} from "@connectrpc/connect";
import { codeToHttpStatus, errorToJsonBytes, parseTimeout } from "@connectrpc/connect/protocol-connect";
import { unaryFastPathEnabled } from "./switch.js";

/** What the fast path needs to serve the routes' unary methods. */
export interface UnaryFastPathOptions {
  routes: (router: ConnectRouter) => void;
  interceptors: Interceptor[];
  readMaxBytes: number;
  contextValues: (stream: http2.ServerHttp2Stream) => ContextValues;
  /** Aborts every call's signal when the server shuts down, as connect-node's `shutdownSignal`. */
  shutdownSignal?: AbortSignal;
  /** Whether there is a fast path at all; unset, RPC_UNARY_FAST_PATH decides (`unaryFastPathEnabled`). */
  unaryFastPath?: boolean | undefined;
}

/**
 * A request the fast path takes, as node's HTTP/2 stream and its headers: answered by the returned
 * promise. Undefined: left to connect-node, through node's compatibility request and response.
 */
export type UnaryFastPath = (stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders) => Promise<void> | undefined;

export type UnarySpec = Extract<MethodImplSpec, { kind: "unary" }>;
/** A unary call's next step, as an interceptor sees it. */
export type UnaryFn = (req: UnaryRequest) => Promise<UnaryResponse>;

const CONTENT_TYPE_PROTO = "application/proto";
const CONTENT_TYPE_JSON = "application/json";

/**
 * Connect's unary protocol with a binary body over HTTP/2, the one shape our own services' clients
 * send, served without connect-node's universal request and response layer: that layer (async
 * iterables over a one-message body, a second abort controller per call, header objects converted
 * twice) cost more CPU per call than the ledger's money path (docs/decisions/unary-fast-path.md).
 *
 * Everything else stays Connect's: the same method implementations and interceptors, run as
 * Connect's `invokeUnaryImplementation` runs them; a handler context with what Connect's
 * `createHandlerContext` gives (deadline, signal, headers, context values; see `CallContext`);
 * the same body limits and parse errors (Connect's words, `parseRequest`; the bytes read and
 * written by protobuf-es, as Connect's binary serialization reads and writes them); the same error JSON and HTTP status (`errorToJsonBytes`,
 * `codeToHttpStatus`); and trailers as `trailer-` headers, as `trailerMux` writes them. A request
 * of any other shape (JSON, GET, compressed, streaming, HTTP/1.1, an unknown path or protocol
 * version) returns undefined and goes to connect-node as before. `unary-fast-path.test.ts` holds
 * both to the same answers.
 *
 * Undefined when the fast path is off (`unaryFastPath` false, or RPC_UNARY_FAST_PATH=false): then
 * every request is connect-node's.
 */
export function createUnaryFastPath(options: UnaryFastPathOptions): UnaryFastPath | undefined {
  if (!(options.unaryFastPath ?? unaryFastPathEnabled())) return undefined;
  const methods = unaryMethods(options.routes);

  return (stream, headers) => {
    if (headers[":method"] !== "POST") return undefined;
    const spec = methods.get(headers[":path"] ?? "");
    if (!spec) return undefined;
    if (headers["content-type"] !== CONTENT_TYPE_PROTO) return undefined;
    const encoding = headers["content-encoding"];
    if (encoding !== undefined && encoding !== "identity") return undefined;
    const version = headers["connect-protocol-version"];
    if (version !== undefined && version !== "1") return undefined;
    return serve(spec, stream, headers, options);
  };
}

/** The routes' unary methods by path (`/package.Service/Method`). */
export function unaryMethods(routes: (router: ConnectRouter) => void): Map<string, UnarySpec> {
  const methods = new Map<string, UnarySpec>();
  const recorder = {
    service(service: Parameters<ConnectRouter["service"]>[0], impl: Parameters<ConnectRouter["service"]>[1]) {
      const serviceSpec = createServiceImplSpec(service, impl as never);
      for (const spec of Object.values(serviceSpec.methods)) {
        if (spec.kind !== "unary") continue;
        methods.set(`/${service.typeName}/${spec.method.name}`, spec);
      }
      return recorder;
    },
    // A single method routed on its own, or a route of any other kind, stays with connect-node.
    rpc: () => recorder,
    handlers: [],
  } as unknown as ConnectRouter;
  routes(recorder);
  return methods;
}

// The stream's own API, not node's compatibility request and response: those two objects (a
// Readable the body is copied through, a response with its own state, a dozen listeners on the
// stream) cost CPU on every call for nothing the fast path needs (docs/decisions/unary-fast-path.md).
async function serve(spec: UnarySpec, stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders, options: UnaryFastPathOptions) {
  // A stream error with no listener would end the process; what it means (the client went away)
  // reaches the call through "close".
  stream.on("error", ignoreStreamError);
  const timeout = parseTimeout(headerValue(headers["connect-timeout-ms"]), Number.POSITIVE_INFINITY);
  const requestHeader = new Headers();
  for (const name in headers) {
    const value = headers[name];
    if (name.charCodeAt(0) === 58 /* ":" */ || value === undefined) continue;
    if (Array.isArray(value)) for (const v of value) requestHeader.append(name, v);
    else requestHeader.set(name, value);
  }
  const call = new CallContext(
    spec,
    `http://${headers[":authority"] || headers.host}${headers[":path"]}`,
    requestHeader,
    options.contextValues(stream),
    timeout.timeoutMs,
    options.shutdownSignal,
  );
  // The call's signal also aborts when the client goes away before the answer, as connect-node's
  // does. This listener goes before the answer is written, so a close it hears is the client's
  // (a reset stream, a lost connection); node counts a reset stream's writable side as ended, so
  // `writableEnded` cannot tell.
  const onClose = () => call.abort(new ConnectError("the request stream has closed", Code.Canceled));
  stream.once("close", onClose);
  let status = 200;
  let body: Uint8Array;
  try {
    if (timeout.error) throw timeout.error;
    const bytes = await readBody(stream, headers, options.readMaxBytes);
    const input = parseRequest(spec.method.input, bytes, options.readMaxBytes);
    const output = await invoke(spec, call, input, options.interceptors);
    body = toBinary(spec.method.output, output);
  } catch (e) {
    call.abort(e);
    const error = e instanceof ConnectError ? e : new ConnectError("internal error", Code.Internal, undefined, undefined, e);
    status = codeToHttpStatus(error.code);
    call.responseHeader.set("content-type", CONTENT_TYPE_JSON);
    for (const [key, value] of error.metadata) call.responseHeader.set(key, value);
    body = errorToJsonBytes(error, undefined);
  } finally {
    call.abort();
  }
  stream.removeListener("close", onClose);
  if (stream.destroyed || stream.closed || stream.headersSent) return;
  // What Connect's `trailerMux` makes (trailers as `trailer-` headers), written straight into
  // the object node takes instead of through a third Headers.
  const out: http2.OutgoingHttpHeaders = { ":status": status };
  call.responseHeader.forEach((value, name) => {
    out[name] = value;
  });
  call.responseTrailer.forEach((value, name) => {
    out[`trailer-${name}`] = value;
  });
  out["content-length"] = String(body.byteLength);
  // respond() adds the date header, as the compatibility response does.
  stream.respond(out);
  stream.end(body);
}

function ignoreStreamError(): void {}

/**
 * A request's message, as Connect's binary serialization parses it (its size limit and its errors,
 * word for word, and its code: bytes that are not the message are internal to Connect, a documented
 * difference from the rest of our API, docs/api.md), decoded by protobuf-es's `fromBinary`.
 */
export function parseRequest(desc: DescMessage, bytes: Uint8Array, readMaxBytes: number): Message {
  if (bytes.byteLength > readMaxBytes) {
    throw new ConnectError(
      `message size ${bytes.byteLength} is larger than configured readMaxBytes ${readMaxBytes}`,
      Code.ResourceExhausted,
    );
  }
  try {
    return fromBinary(desc, bytes);
  } catch (e) {
    throw new ConnectError(`parse binary: ${e instanceof Error ? e.message : String(e)}`, Code.Internal);
  }
}

/**
 * The handler context of one call, as Connect's `createHandlerContext` builds it, except that its
 * signal (an `AbortController`, a deadline timer and a link to the shutdown signal) is made only
 * when something reads it: no interceptor or handler of ours does, and building them for every
 * call was most of what the context cost. Read, it behaves as Connect's: aborted at the deadline,
 * when the client goes away, at shutdown, and with no reason (an `AbortError`) at the end.
 */
export class CallContext implements HandlerContext {
  readonly service: DescService;
  readonly method: DescMethod;
  readonly requestMethod = "POST";
  readonly protocolName = "connect";
  readonly responseHeader = new Headers({ "content-type": CONTENT_TYPE_PROTO });
  readonly responseTrailer = new Headers();
  private readonly deadline: number | undefined;
  private controller: AbortController | undefined;
  private timer: NodeJS.Timeout | undefined;
  private onShutdown: (() => void) | undefined;
  private ended = false;
  /** Why the call ended; undefined when it completed, which aborts with an `AbortError` as Connect's does. */
  private endReason: unknown;

  constructor(
    spec: UnarySpec,
    readonly url: string,
    readonly requestHeader: Headers,
    readonly values: ContextValues,
    timeoutMs: number | undefined,
    private readonly shutdown: AbortSignal | undefined,
  ) {
    this.service = spec.method.parent;
    this.method = spec.method;
    this.deadline = timeoutMs === undefined ? undefined : Date.now() + timeoutMs;
  }

  timeoutMs(): number | undefined {
    return this.deadline === undefined ? undefined : this.deadline - Date.now();
  }

  get signal(): AbortSignal {
    if (this.controller) return this.controller.signal;
    const controller = new AbortController();
    this.controller = controller;
    if (this.ended) {
      controller.abort(this.endReason);
      return controller.signal;
    }
    if (this.shutdown?.aborted) controller.abort(this.shutdown.reason);
    else if (this.shutdown) {
      this.onShutdown = () => this.abort(this.shutdown?.reason);
      this.shutdown.addEventListener("abort", this.onShutdown);
    }
    const left = this.timeoutMs();
    if (left !== undefined) {
      const expire = () => this.abort(new ConnectError("the operation timed out", Code.DeadlineExceeded));
      if (left <= 0) expire();
      else this.timer = setTimeout(expire, left);
    }
    return controller.signal;
  }

  /** Ends the call's signal with `reason` (the call completed, when none); the first reason stays. */
  abort(reason?: unknown): void {
    if (this.ended) return;
    this.ended = true;
    this.endReason = reason;
    if (this.timer) clearTimeout(this.timer);
    if (this.onShutdown) this.shutdown?.removeEventListener("abort", this.onShutdown);
    this.controller?.abort(reason);
  }
}

/**
 * Runs the method through the interceptors as Connect's `invokeUnaryImplementation` does: the same
 * request and response objects (the request's signal read only if an interceptor reads it), the
 * handler given the context as the interceptors left the request, and the response's headers and
 * trailers copied into the call's.
 */
export async function invoke(spec: UnarySpec, call: CallContext, input: Message, interceptors: Interceptor[]): Promise<Message> {
  const method = spec.method;
  let next: UnaryFn = async (req) => {
    const message = create(method.output, (await spec.impl(req.message, new InvokeContext(call, req))) as never);
    return {
      stream: false,
      service: method.parent,
      method,
      header: call.responseHeader,
      trailer: call.responseTrailer,
      message,
    } as UnaryResponse;
  };
  for (let i = interceptors.length - 1; i >= 0; i--) next = interceptors[i]!(next as never) as unknown as UnaryFn;
  const response = await next(new InvokeRequest(call, input) as unknown as UnaryRequest);
  copyHeaders(response.header, call.responseHeader);
  copyHeaders(response.trailer, call.responseTrailer);
  return response.message as Message;
}

// The request the interceptors see and the context the handler gets are classes, not object
// literals, because a literal with a getter (the signal, read only on demand) is built by V8 as a
// dictionary-mode object on every call: a property dictionary allocated each time, and slow
// property reads (docs/decisions/hidden-classes-per-call.md).

/** The request as the interceptors see it, as Connect's `invokeUnaryImplementation` builds it. */
class InvokeRequest {
  readonly stream = false;
  readonly service: DescService;
  readonly method: DescMethod;
  readonly requestMethod: string;
  readonly url: string;
  readonly header: Headers;
  readonly contextValues: ContextValues;

  constructor(
    private readonly call: CallContext,
    readonly message: Message,
  ) {
    this.service = call.service;
    this.method = call.method;
    this.requestMethod = call.requestMethod;
    this.url = call.url;
    this.header = call.requestHeader;
    this.contextValues = call.values;
  }

  get signal(): AbortSignal {
    return this.call.signal;
  }
}

/** The handler's context, as the interceptors left the request. */
class InvokeContext implements HandlerContext {
  readonly service: DescService;
  readonly method: DescMethod;
  readonly requestMethod: string;
  readonly protocolName: string;
  readonly url: string;
  readonly requestHeader: Headers;
  readonly responseHeader: Headers;
  readonly responseTrailer: Headers;
  readonly values: ContextValues;

  constructor(
    private readonly call: CallContext,
    private readonly req: UnaryRequest,
  ) {
    this.service = req.service;
    this.method = call.method;
    this.requestMethod = call.requestMethod;
    this.protocolName = call.protocolName;
    this.url = call.url;
    this.requestHeader = req.header;
    this.responseHeader = call.responseHeader;
    this.responseTrailer = call.responseTrailer;
    this.values = req.contextValues;
  }

  timeoutMs(): number | undefined {
    return this.call.timeoutMs();
  }

  get signal(): AbortSignal {
    return this.req.signal;
  }
}

function copyHeaders(from: Headers, to: Headers): void {
  if (from === to) return;
  for (const key of [...to.keys()]) to.delete(key);
  for (const [key, value] of from) to.set(key, value);
}

function headerValue(value: string | string[] | undefined): string | null {
  if (value === undefined) return null;
  return Array.isArray(value) ? value.join(", ") : value;
}

/**
 * The request's body, read as connect-node reads it: refused with resource_exhausted when its
 * declared length or the bytes read pass `readMaxBytes`, and with invalid_argument when a declared
 * length and the bytes sent disagree, with the same messages.
 */
function readBody(stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders, readMaxBytes: number): Promise<Uint8Array> {
  const declared = headers["content-length"];
  const hint = declared === undefined ? Number.NaN : Number.parseInt(declared, 10);
  const known = Number.isSafeInteger(hint) && hint >= 0;
  if (known && hint > readMaxBytes) {
    return Promise.reject(
      new ConnectError(`message size ${hint} is larger than configured readMaxBytes ${readMaxBytes}`, Code.ResourceExhausted),
    );
  }
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const stop = () => {
      stream.removeListener("data", onData);
      stream.removeListener("end", onEnd);
      stream.removeListener("close", onClosed);
    };
    // What is still sent is read and dropped, so the client's flow-control window stays open.
    const refuse = (error: ConnectError) => {
      stop();
      stream.resume();
      reject(error);
    };
    const onData = (chunk: Buffer) => {
      size += chunk.byteLength;
      if (known && size > hint)
        return refuse(new ConnectError(`protocol error: promised ${hint} bytes, received ${size}`, Code.InvalidArgument));
      if (size > readMaxBytes)
        return refuse(new ConnectError(`message size is larger than configured readMaxBytes ${readMaxBytes}`, Code.ResourceExhausted));
      chunks.push(chunk);
    };
    const onEnd = () => {
      stop();
      if (known && size < hint)
        return reject(new ConnectError(`protocol error: promised ${hint} bytes, received ${size}`, Code.InvalidArgument));
      resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks));
    };
    // The stream closed before its body ended (the client reset it, or the connection went): no
    // answer can reach the client.
    const onClosed = () => {
      stop();
      reject(new ConnectError("the request body could not be read", Code.Aborted));
    };
    stream.on("data", onData);
    stream.once("end", onEnd);
    stream.once("close", onClosed);
  });
}
