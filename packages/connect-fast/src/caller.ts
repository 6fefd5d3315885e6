// The caller's side of a unary call, shared by this package's transports (in memory, and HTTP/2
// at a URL): Connect's request object, the caller's interceptors, the caller's signal and deadline.
import { create, type DescMessage, type DescMethodUnary, type MessageInitShape } from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  createContextValues,
  type ContextValues,
  type Interceptor,
  type UnaryRequest,
  type UnaryResponse,
} from "@connectrpc/connect";
import type { UnaryFn } from "./unary-fast-path.js";

/** The signal of a call whose caller gave none. */
const neverAborted = new AbortController().signal;

/** A unary call as its caller made it, for `runCallerUnary`. */
export interface CallerUnary {
  method: DescMethodUnary<DescMessage, DescMessage>;
  url: string;
  /** The request's headers, as the interceptors will see them. */
  header: Headers;
  input: MessageInitShape<DescMessage>;
  contextValues: ContextValues | undefined;
  signal: AbortSignal | undefined;
  /** The deadline, in ms from now; undefined for none. */
  timeoutMs: number | undefined;
  /** Hears the call ended early by its signal or deadline, so that whatever still works on it can stop. */
  onEnd?: (reason: ConnectError) => void;
}

/**
 * The caller's side of a unary call, as Connect's `runUnaryCall` runs it, for our transports (in
 * memory, and HTTP/2 at a URL): the request object Connect builds, the caller's interceptors
 * around `send`, and the answer raced against the caller's signal and deadline.
 */
export function runCallerUnary(interceptors: Interceptor[], send: UnaryFn, call: CallerUnary): Promise<UnaryResponse> {
  let next = send;
  for (let i = interceptors.length - 1; i >= 0; i--) next = interceptors[i]!(next as never) as unknown as UnaryFn;
  const request = {
    stream: false,
    service: call.method.parent,
    method: call.method,
    requestMethod: "POST",
    url: call.url,
    header: call.header,
    contextValues: call.contextValues ?? createContextValues(),
    message: create(call.method.input, call.input),
    signal: call.signal ?? neverAborted,
  } as unknown as UnaryRequest;
  return withDeadline(next(request), call.signal, call.timeoutMs, call.onEnd);
}

/**
 * `answer`, or the caller's end first: its signal's reason, or deadline_exceeded at its deadline.
 * `onEnd` hears that early end, so that whatever still works on the call can stop.
 */
function withDeadline<T>(
  answer: Promise<T>,
  signal: AbortSignal | undefined,
  timeoutMs: number | undefined,
  onEnd?: (reason: ConnectError) => void,
): Promise<T> {
  if (!signal && timeoutMs === undefined) return answer;
  return new Promise<T>((resolve, reject) => {
    let timer: NodeJS.Timeout | undefined;
    const end = (reason: ConnectError) =>
      finish(() => {
        onEnd?.(reason);
        reject(reason);
      });
    const onAbort = () => end(ConnectError.from(signal?.reason, Code.Canceled));
    const finish = (settle: () => void) => {
      if (timer) clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
      settle();
    };
    // Observed first: once the call has ended early, the answer's own failure goes nowhere.
    answer.then(
      (value) => finish(() => resolve(value)),
      (err: unknown) => finish(() => reject(err)),
    );
    if (signal?.aborted) return onAbort();
    signal?.addEventListener("abort", onAbort);
    if (timeoutMs !== undefined) {
      timer = setTimeout(() => end(new ConnectError("the operation timed out", Code.DeadlineExceeded)), Math.max(timeoutMs, 0));
    }
  });
}
