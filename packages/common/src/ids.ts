import { randomBytes } from "node:crypto";

// Crockford's base32, lowercased: no i, l, o or u, so ids survive being read aloud or retyped.
const ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz";
const SUFFIX_LENGTH = 26;
const SUFFIX_PATTERN = /^[0-9a-hjkmnp-tv-z]{26}$/;

/** Prefixes of every kind of id, as SPEC.md and DESIGN.md name them. */
export const ID_PREFIX = {
  account: "acct_",
  program: "prg_",
  entity: "ent_",
  leg: "trx_",
  group: "trx-grp_",
  hold: "hold_",
  event: "evt_",
  endpoint: "whe_",
  delivery: "whd_",
  apiKey: "key_",
} as const;

export type IdKind = keyof typeof ID_PREFIX;

/**
 * A new id of the given kind: prefix, then 48 bits of milliseconds and 80 random bits in base32,
 * so ids sort by creation time (keyset pagination relies on it) and never collide in practice.
 */
export function newId(kind: IdKind): string {
  return ID_PREFIX[kind] + timeOrderedSuffix(Date.now());
}

function timeOrderedSuffix(ms: number): string {
  const random = randomBytes(10);
  let out = "";
  // 10 base32 digits of time (50 bits, the top 2 always zero for the next 8,000 years).
  let time = ms;
  const timeDigits: string[] = [];
  for (let i = 0; i < 10; i++) {
    timeDigits.push(ALPHABET[time % 32]!);
    time = Math.floor(time / 32);
  }
  out += timeDigits.reverse().join("");
  // 16 base32 digits of randomness (80 bits): 5 bytes make 8 digits.
  for (let chunk = 0; chunk < 2; chunk++) {
    let bits = 0n;
    for (let b = 0; b < 5; b++) bits = (bits << 8n) | BigInt(random[chunk * 5 + b]!);
    for (let d = 7; d >= 0; d--) out += ALPHABET[Number((bits >> BigInt(d * 5)) & 31n)];
  }
  return out;
}

/** Whether `value` is a well-formed id of the given kind. Used to reject garbage before a query. */
export function isId(kind: IdKind, value: string): boolean {
  const prefix = ID_PREFIX[kind];
  return (
    value.length === prefix.length + SUFFIX_LENGTH &&
    value.startsWith(prefix) &&
    SUFFIX_PATTERN.test(value.slice(prefix.length))
  );
}
