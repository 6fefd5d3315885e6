import type * as http2 from "node:http2";
import type { DescMethodUnary } from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  createHandlerContext,
  createServiceImplSpec,
  type ConnectRouter,
  type ContextValues,
  type Interceptor,
  type MethodImplSpec,
} from "@connectrpc/connect";
import { createMethodSerializationLookup, invokeUnaryImplementation, type MethodSerializationLookup } from "@connectrpc/connect/protocol";
import { codeToHttpStatus, errorToJsonBytes, parseTimeout, trailerMux } from "@connectrpc/connect/protocol-connect";

/** What the fast path needs to serve the routes' unary methods. */
export interface UnaryFastPathOptions {
  routes: (router: ConnectRouter) => void;
  interceptors: Interceptor[];
  readMaxBytes: number;
  contextValues: (req: http2.Http2ServerRequest) => ContextValues;
  /** Aborts every call's signal when the server shuts down, as connect-node's `shutdownSignal`. */
  shutdownSignal?: AbortSignal;
}

/** A request the fast path takes: answered by the returned promise. Undefined: left to connect-node. */
export type UnaryFastPath = (req: http2.Http2ServerRequest, res: http2.Http2ServerResponse) => Promise<void> | undefined;

interface Method {
  spec: Extract<MethodImplSpec, { kind: "unary" }>;
  serialization: MethodSerializationLookup<DescMethodUnary["input"], DescMethodUnary["output"]>;
}

const CONTENT_TYPE_PROTO = "application/proto";
const CONTENT_TYPE_JSON = "application/json";

/**
 * Connect's unary protocol with a binary body over HTTP/2, the one shape our own services' clients
 * send, served without connect-node's universal request and response layer: that layer (async
 * iterables over a one-message body, a second abort controller per call, header objects converted
 * twice) cost about 0.3 ms of CPU per call, more than the ledger's money path (bench/README.md).
 *
 * Everything else stays Connect's: the same method implementations and interceptors
 * (`invokeUnaryImplementation`), the same handler context (`createHandlerContext`: deadline,
 * signal, headers, context values), the same body limits and parse errors (Connect's
 * serialization), the same error JSON and HTTP status (`errorToJsonBytes`, `codeToHttpStatus`),
 * and trailers as `trailer-` headers (`trailerMux`). A request of any other shape (JSON, GET,
 * compressed, streaming, HTTP/1.1, an unknown path or protocol version) returns undefined and goes
 * to connect-node as before. `unary-fast-path.test.ts` holds both to the same answers.
 */
export function createUnaryFastPath(options: UnaryFastPathOptions): UnaryFastPath {
  const methods = new Map<string, Method>();
  const limits = { readMaxBytes: options.readMaxBytes, writeMaxBytes: 0xffffffff };
  const recorder = {
    service(service: Parameters<ConnectRouter["service"]>[0], impl: Parameters<ConnectRouter["service"]>[1]) {
      const serviceSpec = createServiceImplSpec(service, impl as never);
      for (const spec of Object.values(serviceSpec.methods)) {
        if (spec.kind !== "unary") continue;
        methods.set(`/${service.typeName}/${spec.method.name}`, {
          spec,
          serialization: createMethodSerializationLookup(spec.method, undefined, undefined, limits),
        });
      }
      return recorder;
    },
    // A single method routed on its own, or a route of any other kind, stays with connect-node.
    rpc: () => recorder,
    handlers: [],
  } as unknown as ConnectRouter;
  options.routes(recorder);

  return (req, res) => {
    if (req.method !== "POST") return undefined;
    const method = methods.get(req.url);
    if (!method) return undefined;
    const headers = req.headers;
    if (headers["content-type"] !== CONTENT_TYPE_PROTO) return undefined;
    const encoding = headers["content-encoding"];
    if (encoding !== undefined && encoding !== "identity") return undefined;
    const version = headers["connect-protocol-version"];
    if (version !== undefined && version !== "1") return undefined;
    return serve(method, req, res, options);
  };
}

async function serve(method: Method, req: http2.Http2ServerRequest, res: http2.Http2ServerResponse, options: UnaryFastPathOptions) {
  const { spec, serialization } = method;
  const timeout = parseTimeout(headerValue(req.headers["connect-timeout-ms"]), Number.POSITIVE_INFINITY);
  const requestHeader = new Headers();
  for (const [name, value] of Object.entries(req.headers)) {
    if (name.charCodeAt(0) === 58 /* ":" */ || value === undefined) continue;
    if (Array.isArray(value)) for (const v of value) requestHeader.append(name, v);
    else requestHeader.set(name, value);
  }
  // The call's signal also aborts when the client goes away before the answer, as connect-node's does.
  const requestGone = new AbortController();
  const onClose = () => {
    if (!res.writableEnded) requestGone.abort(new ConnectError("the request stream has closed", Code.Canceled));
  };
  res.once("close", onClose);
  const context = createHandlerContext({
    service: spec.method.parent,
    method: spec.method,
    protocolName: "connect",
    requestMethod: "POST",
    url: `http://${req.authority}${req.url}`,
    ...(timeout.timeoutMs !== undefined ? { timeoutMs: timeout.timeoutMs } : {}),
    ...(options.shutdownSignal ? { shutdownSignal: options.shutdownSignal } : {}),
    requestSignal: requestGone.signal,
    requestHeader,
    responseHeader: { "content-type": CONTENT_TYPE_PROTO },
    contextValues: options.contextValues(req),
  });
  let status = 200;
  let body: Uint8Array;
  try {
    if (timeout.error) throw timeout.error;
    const bytes = await readBody(req, options.readMaxBytes);
    const input = serialization.getI(true).parse(bytes);
    const output = await invokeUnaryImplementation(spec, context, input, options.interceptors);
    body = serialization.getO(true).serialize(output);
  } catch (e) {
    context.abort(e);
    const error = e instanceof ConnectError ? e : new ConnectError("internal error", Code.Internal, undefined, undefined, e);
    status = codeToHttpStatus(error.code);
    context.responseHeader.set("content-type", CONTENT_TYPE_JSON);
    for (const [key, value] of error.metadata) context.responseHeader.set(key, value);
    body = errorToJsonBytes(error, undefined);
  } finally {
    context.abort();
  }
  const header = trailerMux(context.responseHeader, context.responseTrailer);
  header.set("content-length", String(body.byteLength));
  res.removeListener("close", onClose);
  if (res.writableEnded || res.destroyed) return;
  const out: Record<string, string> = {};
  header.forEach((value, name) => {
    out[name] = value;
  });
  res.writeHead(status, out);
  res.end(body);
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
function readBody(req: http2.Http2ServerRequest, readMaxBytes: number): Promise<Uint8Array> {
  const declared = req.headers["content-length"];
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
    const refuse = (error: ConnectError) => {
      req.removeAllListeners("data");
      req.removeAllListeners("end");
      req.resume();
      reject(error);
    };
    req.on("data", (chunk: Buffer) => {
      size += chunk.byteLength;
      if (known && size > hint)
        return refuse(new ConnectError(`protocol error: promised ${hint} bytes, received ${size}`, Code.InvalidArgument));
      if (size > readMaxBytes)
        return refuse(new ConnectError(`message size is larger than configured readMaxBytes ${readMaxBytes}`, Code.ResourceExhausted));
      chunks.push(chunk);
    });
    req.once("end", () => {
      if (known && size < hint)
        return reject(new ConnectError(`protocol error: promised ${hint} bytes, received ${size}`, Code.InvalidArgument));
      resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks));
    });
    req.once("error", (err) => reject(new ConnectError("the request body could not be read", Code.Aborted, undefined, undefined, err)));
  });
}
