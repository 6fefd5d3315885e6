import { invalidArgument } from "./errors.js";

/**
 * The largest amount, in minor units: 2^53-1, the largest integer a JSON number carries exactly
 * (docs/api.md#amounts-and-text). Every amount and every transaction total stays within it.
 */
export const MAX_AMOUNT = BigInt(Number.MAX_SAFE_INTEGER);

/**
 * The bound of every balance of every entity, either way: balances reach clients as JSON numbers
 * too, so they stay within ±(2^53-1) like amounts (docs/architecture.md#money-rules-and-invariants).
 * A program's external entity goes down by every deposit, so this also bounds a program's net
 * deposits in one currency. The ledger's database backs it with a check constraint
 * (services/ledger/migrations/0008_balances_within_json_integers.sql).
 */
export const MAX_BALANCE = MAX_AMOUNT;

/** Checks an amount an RPC was sent: a positive integer in minor units, at most `MAX_AMOUNT`. */
export function parseAmount(amount: bigint, field = "amount"): bigint {
  if (amount <= 0n) throw invalidArgument(`${field} must be a positive integer in minor units`, { [field]: Number(amount) });
  if (amount > MAX_AMOUNT) throw invalidArgument(`${field} must be at most ${MAX_AMOUNT}`);
  return amount;
}

/** Checks an overdraft limit: an amount that may be zero, 0 to `MAX_AMOUNT` (docs/api.md#entities). */
export function parseOverdraftLimit(limit: bigint, field = "overdraft_limit"): bigint {
  if (limit < 0n) throw invalidArgument(`${field} must be zero or a positive integer in minor units`, { field });
  if (limit > MAX_AMOUNT) throw invalidArgument(`${field} must be at most ${MAX_AMOUNT}`, { field });
  return limit;
}

/** An amount as a JSON number; one beyond `MAX_AMOUNT` either way would lose digits, so it throws. */
export function amountToJson(amount: bigint): number {
  if (amount > MAX_AMOUNT || amount < -MAX_AMOUNT) throw new Error(`amount ${amount} does not fit a JSON integer`);
  return Number(amount);
}
