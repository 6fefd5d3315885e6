import { createHmac, timingSafeEqual } from "node:crypto";

/** Options of `verifyWebhook`. */
export interface VerifyOptions {
  /** Oldest (and most future) a signature timestamp may be, in seconds. Default 300. */
  toleranceSeconds?: number;
  /** The current time in Unix seconds; for tests. */
  now?: number;
}

/** Why a delivery was refused, as a stable code to branch on or log. */
export type WebhookVerificationReason = "malformed_header" | "timestamp_out_of_tolerance" | "no_matching_signature" | "no_secret";

/** Why a delivery was refused; `verifyWebhook` throws it. */
export class WebhookVerificationError extends Error {
  constructor(
    readonly reason: WebhookVerificationReason,
    message: string,
  ) {
    super(message);
    this.name = "WebhookVerificationError";
  }
}

/**
 * Verifies a delivery as its receiver should: recomputes
 * HMAC-SHA256(secret, `<t>.<rawBody>`) for each secret (several during a secret roll), compares it
 * in constant time with every `v1=` of the `X-Service-Signature` header, and refuses a timestamp
 * older or further in the future than the tolerance, which stops replays.
 * Returns the parsed body on success; throws WebhookVerificationError otherwise.
 *
 * `rawBody` must be the exact bytes received: a body parsed and re-serialised will not verify.
 */
export function verifyWebhook<T = unknown>(
  rawBody: string | Uint8Array,
  header: string | undefined,
  secrets: string | string[],
  options: VerifyOptions = {},
): T {
  const keys = (Array.isArray(secrets) ? secrets : [secrets]).filter((s) => s.length > 0);
  if (keys.length === 0) throw new WebhookVerificationError("no_secret", "no signing secret was given");
  if (!header) throw new WebhookVerificationError("malformed_header", "the X-Service-Signature header is missing");
  let timestamp: number | undefined;
  const signatures: Buffer[] = [];
  for (const part of header.split(",")) {
    const [name, value] = part.trim().split("=", 2);
    if (name === "t" && value && /^\d{1,12}$/.test(value)) timestamp = Number(value);
    else if (name === "v1" && value && /^[0-9a-f]{64}$/.test(value)) signatures.push(Buffer.from(value, "hex"));
  }
  if (timestamp === undefined || signatures.length === 0) {
    throw new WebhookVerificationError("malformed_header", "the X-Service-Signature header must look like t=<unix>,v1=<hex>");
  }
  const tolerance = options.toleranceSeconds ?? 300;
  const now = options.now ?? Math.floor(Date.now() / 1000);
  if (Math.abs(now - timestamp) > tolerance) {
    throw new WebhookVerificationError("timestamp_out_of_tolerance", `the signature timestamp is more than ${tolerance} s from now`);
  }
  const body = typeof rawBody === "string" ? Buffer.from(rawBody, "utf8") : Buffer.from(rawBody);
  let matched = false;
  for (const key of keys) {
    const expected = createHmac("sha256", key).update(`${timestamp}.`).update(body).digest();
    // Every comparison runs, so the time taken does not tell which secret or signature matched.
    for (const signature of signatures) matched = timingSafeEqual(expected, signature) || matched;
  }
  if (!matched) throw new WebhookVerificationError("no_matching_signature", "no signature matches the body with the given secrets");
  return JSON.parse(body.toString("utf8")) as T;
}
