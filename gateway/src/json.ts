import type { ConnectError } from "@connectrpc/connect";
import { invalidArgument } from "@ledger/common";

/**
 * JSON text a renderer wrote itself, which `toJson` writes as it is: for a long list whose items
 * the renderer can write straight into text, without an object per item for `toJson` to walk
 * (render.ts, renderStatement). The renderer answers for it being valid JSON.
 */
export class JsonText {
  constructor(readonly text: string) {}
}

/**
 * JSON text for API responses. Money is bigint inside the services and JSON.stringify throws on
 * bigint, so this writer prints bigints as plain integer literals, exactly, on purpose. It builds
 * one string as it goes and quotes each member name once per process (a batch answer repeats the
 * same few names thousands of times); json.test.ts checks it against JSON.stringify.
 */
export function toJson(value: unknown): string {
  if (value instanceof JsonText) return value.text;
  switch (typeof value) {
    case "bigint":
      return value.toString();
    case "string":
      return JSON.stringify(value);
    case "number":
      return Number.isFinite(value) ? String(value) : "null";
    case "boolean":
      return value ? "true" : "false";
    case "object": {
      if (value === null) return "null";
      if (Array.isArray(value)) {
        let out = "[";
        for (let i = 0; i < value.length; i++) {
          if (i > 0) out += ",";
          const item: unknown = value[i];
          out += item === undefined ? "null" : toJson(item);
        }
        return out + "]";
      }
      if (value instanceof Date) return JSON.stringify(value.toISOString());
      let out = "{";
      for (const key in value) {
        if (!Object.hasOwn(value, key)) continue;
        const item = (value as Record<string, unknown>)[key];
        if (item === undefined) continue;
        if (out.length > 1) out += ",";
        out += quoted(key) + ":" + toJson(item);
      }
      return out + "}";
    }
    default:
      return "null";
  }
}

const quotedNames = new Map<string, string>();

/** A member name as JSON, remembered for the API's own names (bounded: metadata brings the client's). */
function quoted(name: string): string {
  let q = quotedNames.get(name);
  if (q === undefined) {
    q = JSON.stringify(name);
    if (quotedNames.size < 1_000) quotedNames.set(name, q);
  }
  return q;
}

/**
 * A request body's JSON text, read as JSON.parse reads it but refusing with 400 `invalid_request`
 * what JSON.parse would take with a silent guess: a key given twice in one object (JSON.parse keeps
 * the last, so `{"amount":1,"amount":2}` would move 2), at any depth, and a NUL character (U+0000,
 * which Postgres text cannot hold) in any string or key. It stays cheap for bodies that have
 * neither: one pass of indexOf over the text counts the members it writes, one walk of the parsed
 * value counts the members it kept, and only when the two differ (or the text has a `\u0000`
 * escape, the only way JSON can carry a NUL) is the body read again to say where.
 */
export function parseRequestJson(text: string): unknown {
  const value: unknown = JSON.parse(text);
  if (membersWritten(text) !== membersKept(value)) throw duplicateKey(text);
  const nul = text.includes("\\u0000") ? nulIn(value) : undefined;
  if (nul) {
    const where = nul.field || "the request body";
    const details = nul.field ? { field: nul.field } : undefined;
    throw invalidArgument(`${nul.inKey ? `keys of ${where}` : where} must not contain NUL characters`, details);
  }
  return value;
}

/** How many object members valid JSON text writes: one colon each, outside strings. */
function membersWritten(text: string): number {
  let members = 0;
  let from = 0;
  for (;;) {
    const quote = text.indexOf('"', from);
    const end = quote === -1 ? text.length : quote;
    for (let i = from; i < end; i++) if (text.charCodeAt(i) === 0x3a) members++;
    if (quote === -1) return members;
    from = stringEnd(text, quote) + 1;
  }
}

/** Where the string of valid JSON text opening at `open` closes: the first quote after it not escaped. */
function stringEnd(text: string, open: number): number {
  let close = text.indexOf('"', open + 1);
  for (;;) {
    let backslashes = 0;
    while (text.charCodeAt(close - 1 - backslashes) === 0x5c) backslashes++;
    if (backslashes % 2 === 0) return close;
    close = text.indexOf('"', close + 1);
  }
}

/** How many object members a parsed value holds, at any depth (a walk, not a recursion: no depth exhausts it). */
function membersKept(root: unknown): number {
  if (typeof root !== "object" || root === null) return 0;
  let members = 0;
  const pending: object[] = [root];
  while (pending.length > 0) {
    const node = pending.pop()!;
    if (Array.isArray(node)) {
      for (const item of node) if (typeof item === "object" && item !== null) pending.push(item);
      continue;
    }
    for (const key in node) {
      members++;
      const item: unknown = (node as Record<string, unknown>)[key];
      if (typeof item === "object" && item !== null) pending.push(item);
    }
  }
  return members;
}

/** A JSON path as the error names it: `transactions[1].amount`. */
function pathOf(segments: Array<string | number>): string {
  let path = "";
  for (const segment of segments) path += typeof segment === "number" ? `[${segment}]` : path ? `.${segment}` : segment;
  return path;
}

/** The refusal of valid JSON text that gives a key twice in one object, naming the first such key and where. */
function duplicateKey(text: string): ConnectError {
  // One frame per open object or array: its keys so far, or its index; `at` is where its current member is.
  const frames: Array<{ keys: Set<string> | undefined; at: string | number }> = [];
  let expectKey = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x7b) {
      frames.push({ keys: new Set(), at: "" });
      expectKey = true;
    } else if (c === 0x5b) {
      frames.push({ keys: undefined, at: 0 });
    } else if (c === 0x7d || c === 0x5d) {
      frames.pop();
    } else if (c === 0x2c) {
      const top = frames[frames.length - 1]!;
      if (top.keys) expectKey = true;
      else top.at = (top.at as number) + 1;
    } else if (c === 0x22) {
      const end = stringEnd(text, i);
      const top = frames[frames.length - 1];
      if (expectKey && top?.keys) {
        // Decoded: "a" and "\u0061" are one key.
        const key = JSON.parse(text.slice(i, end + 1)) as string;
        if (top.keys.has(key)) {
          const where = pathOf(frames.slice(0, -1).map((frame) => frame.at));
          const field = pathOf([...frames.slice(0, -1).map((frame) => frame.at), key]);
          const within = where ? ` in ${where}` : "";
          return invalidArgument(`the request body gives the key ${JSON.stringify(key)} twice${within}; give each key once`, { field });
        }
        top.keys.add(key);
        top.at = key;
        expectKey = false;
      }
      i = end;
    }
  }
  return invalidArgument("the request body gives a key twice in one object; give each key once");
}

/** The first string or key holding a NUL character, by its path (a key by the path of its object). */
function nulIn(root: unknown): { field: string; inKey: boolean } | undefined {
  const pending: Array<{ node: unknown; path: Array<string | number> }> = [{ node: root, path: [] }];
  while (pending.length > 0) {
    const { node, path } = pending.pop()!;
    if (typeof node === "string") {
      if (node.includes("\u0000")) return { field: pathOf(path), inKey: false };
    } else if (Array.isArray(node)) {
      for (let i = 0; i < node.length; i++) pending.push({ node: node[i], path: [...path, i] });
    } else if (typeof node === "object" && node !== null) {
      for (const [key, item] of Object.entries(node)) {
        if (key.includes("\u0000")) return { field: pathOf(path), inKey: true };
        pending.push({ node: item, path: [...path, key] });
      }
    }
  }
  return undefined;
}
