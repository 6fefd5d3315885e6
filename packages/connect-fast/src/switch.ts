/** The one switch of this package: the environment variable that turns every fast path off. */
export const UNARY_FAST_PATH_VARIABLE = "RPC_UNARY_FAST_PATH";

/** RPC_UNARY_FAST_PATH holds neither true nor false: the start stops, naming the variable. */
export class UnaryFastPathSwitchError extends Error {
  constructor(readonly problem: string) {
    super(`${UNARY_FAST_PATH_VARIABLE} ${problem}`);
    this.name = "UnaryFastPathSwitchError";
  }
}

/**
 * Whether unary calls take the fast path (the services' ports, calls in one process, calls to a
 * service at a URL), read from RPC_UNARY_FAST_PATH: on unless it says false (`false`, `0`, `no`);
 * unset or empty, on. Off, every call is Connect's own: connect-node's handlers, Connect's router
 * transport in one process, `createConnectTransport` to a URL. This is the only place the
 * variable is read; every constructor of this package that takes `unaryFastPath` asks it when
 * that is not given.
 */
export function unaryFastPathEnabled(env: Record<string, string | undefined> = process.env): boolean {
  const raw = env[UNARY_FAST_PATH_VARIABLE];
  if (raw === undefined || raw === "") return true;
  const lowered = raw.trim().toLowerCase();
  if (["true", "1", "yes"].includes(lowered)) return true;
  if (["false", "0", "no"].includes(lowered)) return false;
  throw new UnaryFastPathSwitchError(`must be true or false, got ${JSON.stringify(raw)}`);
}
