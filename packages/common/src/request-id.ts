// The request id every call carries, from the gateway through every RPC and into events and logs.
import { randomUUID } from "node:crypto";
import { Code, createContextKey, type HandlerContext, type Interceptor } from "@connectrpc/connect";
import type { Logger } from "pino";
import { clientSafeError } from "./database-errors.js";
import { traceOf, type TraceLink } from "./tracing.js";

const requestIdKey = createContextKey<string>("", { description: "request id" });

/** Header that carries the request id from the gateway through every RPC and into events. */
export const REQUEST_ID_HEADER = "x-request-id";

/**
 * Gives every call a request id (the caller's `x-request-id`, else a new one), echoes it back,
 * and logs calls that failed on the server's side. Client mistakes are logged at debug level.
 */
export function requestIdInterceptor(log: Logger): Interceptor {
  return (next) => async (req) => {
    const incoming = req.header.get(REQUEST_ID_HEADER);
    const requestId = incoming && /^[\w.:-]{1,128}$/.test(incoming) ? incoming : randomUUID();
    req.contextValues.set(requestIdKey, requestId);
    const started = performance.now();
    try {
      const res = await next(req);
      res.header.set(REQUEST_ID_HEADER, requestId);
      log.debug({ request_id: requestId, method: req.method.name, ms: Math.round(performance.now() - started) }, "rpc ok");
      return res;
    } catch (err) {
      const error = clientSafeError(err);
      error.metadata.set(REQUEST_ID_HEADER, requestId);
      const serverSide = [Code.Internal, Code.Unknown, Code.DataLoss, Code.Unavailable].includes(error.code);
      const fields = {
        request_id: requestId,
        method: req.method.name,
        code: Code[error.code],
        ms: Math.round(performance.now() - started),
      };
      if (serverSide) log.error(Object.assign(fields, { err: error.cause ?? error }), "rpc failed");
      else log.debug(Object.assign(fields, { message: error.rawMessage }), "rpc refused");
      throw error;
    }
  };
}

/** The request id of the current call. */
export function requestIdOf(ctx: HandlerContext): string {
  return ctx.values.get(requestIdKey);
}

/** What work caused by a call carries of it: the request id for logs and the trace for spans. */
export interface CallOrigin {
  requestId: string;
  trace: TraceLink;
}

/** The origin of the current call, for the work and events it causes. */
export function originOf(ctx: HandlerContext): CallOrigin {
  return { requestId: requestIdOf(ctx), trace: traceOf(ctx) };
}
