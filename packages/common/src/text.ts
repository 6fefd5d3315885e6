import { invalidArgument } from "./errors.js";

/**
 * Checks a text field a client sent: its length, whether it is required, and that it holds no NUL
 * character, which Postgres cannot store (left unchecked it would fail the write as a 500).
 */
export function parseText(value: string, field: string, options: { required?: boolean; max?: number; trim?: boolean } = {}): string {
  const text = options.trim ? value.trim() : value;
  const max = options.max ?? 1_000;
  if (options.required && text.trim() === "") throw invalidArgument(`${field} is required`, { field });
  if (text.length > max) throw invalidArgument(`${field} must be at most ${max} characters`, { field });
  if (text.includes("\u0000")) throw invalidArgument(`${field} must not contain NUL characters`, { field });
  return text;
}
