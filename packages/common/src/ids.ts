import { randomBytes } from "node:crypto";

// Crockford's base32, lowercased: no i, l, o or u, so ids survive being read aloud or retyped.
const ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz";
const SUFFIX_LENGTH = 26;
const SUFFIX_PATTERN = /^[0-9a-hjkmnp-tv-z]{26}$/;

/** Prefixes of every kind of id (docs/api.md#ids). */
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
  balanceAlert: "bal_",
} as const;

export type IdKind = keyof typeof ID_PREFIX;

/**
 * A new id of the given kind: prefix, then 48 bits of milliseconds and 80 random bits in base32,
 * so ids sort by creation time (keyset pagination relies on it) and never collide in practice.
 */
export function newId(kind: IdKind): string {
  return ID_PREFIX[kind] + timeOrderedSuffix(Date.now());
}

// Random bytes are drawn from the system a few kilobytes at a time: one call per id cost the
// ledger about 1% of its CPU, four ids to a transfer.
const POOL_SIZE = 4096;
let pool = randomBytes(POOL_SIZE);
let poolOffset = 0;

function timeOrderedSuffix(ms: number): string {
  if (poolOffset + 10 > POOL_SIZE) {
    pool = randomBytes(POOL_SIZE);
    poolOffset = 0;
  }
  const at = poolOffset;
  poolOffset += 10;
  // 10 base32 digits of time (50 bits, the top 2 always zero for the next 8,000 years).
  let time = ms;
  let timeDigits = "";
  for (let i = 0; i < 10; i++) {
    timeDigits = ALPHABET[time % 32]! + timeDigits;
    time = Math.floor(time / 32);
  }
  // 16 base32 digits of randomness (80 bits): 5 bytes (40 bits, exact in a double) make 8 digits.
  let out = timeDigits;
  for (let chunk = 0; chunk < 2; chunk++) {
    let bits = 0;
    for (let b = 0; b < 5; b++) bits = bits * 256 + pool[at + chunk * 5 + b]!;
    let digits = "";
    for (let d = 0; d < 8; d++) {
      digits = ALPHABET[bits % 32]! + digits;
      bits = Math.floor(bits / 32);
    }
    out += digits;
  }
  return out;
}

/** Whether `value` is a well-formed id of the given kind. Used to reject garbage before a query. */
export function isId(kind: IdKind, value: string): boolean {
  const prefix = ID_PREFIX[kind];
  return value.length === prefix.length + SUFFIX_LENGTH && value.startsWith(prefix) && SUFFIX_PATTERN.test(value.slice(prefix.length));
}
