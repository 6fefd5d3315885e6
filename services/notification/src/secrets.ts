// Signing secrets at rest: generated here, sealed with the service key, opened to sign (webhook-signer.ts).
import { createCipheriv, createDecipheriv, randomBytes } from "node:crypto";

/** Prefix of every signing secret, as Stripe and Svix users expect. */
export const SECRET_PREFIX = "whsec_";

/** A new signing secret: 32 random bytes after the prefix. */
export function generateSecret(): string {
  return SECRET_PREFIX + randomBytes(32).toString("base64url");
}

// Layout of everything sealed here: version (1 byte), IV (12), GCM tag (16), ciphertext.
const VERSION = 1;

/**
 * Encrypts bytes for storage under the service's key. `aad` (associated data) names what they
 * belong to: opening them under another name fails, so a ciphertext copied elsewhere is useless.
 */
export function seal(key: Buffer, aad: string, plain: Uint8Array): Buffer {
  const iv = randomBytes(12);
  const cipher = createCipheriv("aes-256-gcm", key, iv);
  cipher.setAAD(Buffer.from(aad, "utf8"));
  const ciphertext = Buffer.concat([cipher.update(plain), cipher.final()]);
  return Buffer.concat([Buffer.from([VERSION]), iv, cipher.getAuthTag(), ciphertext]);
}

/** Whether `stored` is in the layout `seal` writes. */
export function isSealed(stored: Uint8Array): boolean {
  return stored.length >= 29 && stored[0] === VERSION;
}

/** Decrypts what `seal` wrote; throws when the key, the name or the bytes are wrong. */
export function open(key: Buffer, aad: string, stored: Uint8Array): Buffer {
  const data = Buffer.from(stored);
  if (data[0] !== VERSION) throw new Error(`unknown sealed format ${data[0]}`);
  const decipher = createDecipheriv("aes-256-gcm", key, data.subarray(1, 13));
  decipher.setAAD(Buffer.from(aad, "utf8"));
  decipher.setAuthTag(data.subarray(13, 29));
  return Buffer.concat([decipher.update(data.subarray(29)), decipher.final()]);
}

/**
 * Encrypts a secret for storage. The endpoint id is the associated data, so a ciphertext copied
 * onto another endpoint's row fails to decrypt instead of signing for it.
 */
export function encryptSecret(key: Buffer, endpointId: string, secret: string): Buffer {
  return seal(key, endpointId, Buffer.from(secret, "utf8"));
}

/** Decrypts a stored secret; throws when the key or the row is wrong. */
export function decryptSecret(key: Buffer, endpointId: string, stored: Uint8Array): string {
  return open(key, endpointId, stored).toString("utf8");
}
