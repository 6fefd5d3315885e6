import type { DescMessage } from "@bufbuild/protobuf";
import type { Interceptor } from "@connectrpc/connect";
import { invalidArgument } from "./errors.js";

const NUL = "\u0000";

/**
 * Checks a text field a client sent: its length, whether it is required, and that it holds no NUL
 * character, which Postgres cannot store (left unchecked it would fail the write as a 500).
 */
export function parseText(value: string, field: string, options: { required?: boolean; max?: number; trim?: boolean } = {}): string {
  const text = options.trim ? value.trim() : value;
  const max = options.max ?? 1_000;
  if (options.required && text.trim() === "") throw invalidArgument(`${field} is required`, { field });
  if (text.length > max) throw invalidArgument(`${field} must be at most ${max} characters`, { field });
  if (text.includes(NUL)) throw invalidArgument(`${field} must not contain NUL characters`, { field });
  return text;
}

/**
 * Refuses a unary RPC request with a NUL character in any of its strings (a field, an item of a
 * list, a map key or value, metadata keys and values at any depth) as invalid_argument naming the
 * field: Postgres text cannot hold NUL, so such a string would fail its statement as a 500, or
 * make a shared transaction of the ledger retry its other commands one by one. One check over the
 * decoded message, after authentication, so no handler's own checks can forget a field. A walk
 * over what the message holds costs little; only a request that has a NUL is walked again, with
 * its schema, to name the field.
 */
export function nulTextInterceptor(): Interceptor {
  return (next) => async (req) => {
    if (!req.stream && holdsNul(req.message)) {
      const field = nulFieldOf(req.method.input, req.message as unknown as Record<string, unknown>, "") ?? "the request";
      throw invalidArgument(`${field} must not contain NUL characters`, { field });
    }
    return next(req);
  };
}

/** Whether any string or key inside `root` holds NUL. A walk, not a recursion; bytes are skipped. */
function holdsNul(root: object): boolean {
  const pending: object[] = [root];
  while (pending.length > 0) {
    const node = pending.pop()!;
    if (ArrayBuffer.isView(node)) continue;
    if (Array.isArray(node)) {
      for (const item of node) {
        if (typeof item === "string") {
          if (item.includes(NUL)) return true;
        } else if (typeof item === "object" && item !== null) pending.push(item);
      }
      continue;
    }
    for (const key in node) {
      if (key.includes(NUL)) return true;
      const item: unknown = (node as Record<string, unknown>)[key];
      if (typeof item === "string") {
        if (item.includes(NUL)) return true;
      } else if (typeof item === "object" && item !== null) pending.push(item);
    }
  }
  return false;
}

/** The path of the field of `message` (of schema `desc`) that holds NUL, by proto names: `transactions[1].idempotency_key`. */
function nulFieldOf(desc: DescMessage, message: Record<string, unknown>, path: string): string | undefined {
  for (const member of desc.members) {
    const chosen = member.kind === "oneof" ? (message[member.localName] as { case?: string; value?: unknown } | undefined) : undefined;
    const field = member.kind === "oneof" ? member.fields.find((f) => f.localName === chosen?.case) : member;
    if (!field) continue;
    const found = nulIn(
      field.message,
      member.kind === "oneof" ? chosen?.value : message[field.localName],
      path ? `${path}.${field.name}` : field.name,
    );
    if (found !== undefined) return found;
  }
  return undefined;
}

/**
 * The path of the NUL in a field's value: a string, a message of schema `desc`, a list or map of
 * them, or JSON (a google.protobuf.Struct held as a JSON object; its keys are the path).
 */
function nulIn(desc: DescMessage | undefined, value: unknown, path: string): string | undefined {
  if (typeof value === "string") return value.includes(NUL) ? path : undefined;
  if (typeof value !== "object" || value === null || ArrayBuffer.isView(value)) return undefined;
  if (desc && "$typeName" in value) return nulFieldOf(desc, value as Record<string, unknown>, path);
  const entries: Array<[string, unknown]> = Array.isArray(value) ? value.map((item, i) => [`[${i}]`, item]) : Object.entries(value);
  for (const [key, item] of entries) {
    if (key.includes(NUL)) return path;
    const found = nulIn(desc, item, Array.isArray(value) ? path + key : `${path}.${key}`);
    if (found !== undefined) return found;
  }
  return undefined;
}
