// Signs each webhook delivery so receivers can check it came from us, unaltered
// (docs/webhooks.md#signing-and-verification; @ledger/webhooks verifies it).
import { createHmac } from "node:crypto";

/**
 * The `X-Service-Signature` value (docs/webhooks.md#signing-and-verification): HMAC-SHA256 of
 * `<t>.<body>` keyed with each secret string exactly as the client holds it, newest first.
 */
export function signatureHeader(body: string, secrets: string[], unixSeconds: number): string {
  const signed = `${unixSeconds}.${body}`;
  const parts = secrets.map((secret) => `v1=${createHmac("sha256", secret).update(signed, "utf8").digest("hex")}`);
  return [`t=${unixSeconds}`, ...parts].join(",");
}
