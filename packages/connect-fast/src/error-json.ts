import { ConnectError } from "@connectrpc/connect";
import { errorFromJsonBytes } from "@connectrpc/connect/protocol-connect";

/**
 * A Connect error answer's body (its error JSON) read back into the `ConnectError` Connect's own
 * client would give, details included (a JSON object without a code is `unknown`, as there), for
 * callers that speak the unary protocol themselves (the bench's load generator); undefined when
 * the body cannot be read as one (not JSON, or a proxy's page).
 */
export function connectErrorFromJson(body: Uint8Array): ConnectError | undefined {
  const unreadable = new ConnectError("not a Connect error");
  try {
    return errorFromJsonBytes(body, undefined, unreadable);
  } catch (e) {
    if (e === unreadable) return undefined;
    throw e;
  }
}
