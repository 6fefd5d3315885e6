import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { MONEY_TABLES } from "./money-tables.js";

// Every statement of the ledger on a money table names its account (docs/scaling.md#what-is-true-now):
// `account_id = ...`, or a join or `in` on it, so a distributed Postgres routes it to the account's
// shard instead of every shard. The partitioned run (vitest.partitioned.config.ts) proves the keys;
// a statement that names no account still runs there, only on every partition, so this check
// reads the SQL itself: each SQL text of services/ledger/src that reads or writes a money table
// must mention account_id. A SQL text is a template literal (with the fragments nested in it) or a
// string literal; comments are skipped. Lists are built by ListQuery, whose spec must name the
// account (a required field, made a condition by its constructor), so a `select:` string of a
// ListQuery spec is that query's head, not a whole statement.

const SOURCE = fileURLToPath(new URL(".", import.meta.url));

/** The string and template literals of TypeScript source, outermost first, with comments skipped. */
function literalsOf(source: string): Array<{ text: string; before: string }> {
  const found: Array<{ text: string; before: string }> = [];
  let i = 0;
  const template = (): string => {
    // At the opening backtick; returns the literal's text, nested templates and expressions included.
    const start = i++;
    while (i < source.length && source[i] !== "`") {
      if (source[i] === "\\") i += 2;
      else if (source[i] === "$" && source[i + 1] === "{") {
        i += 2;
        let depth = 1;
        while (i < source.length && depth > 0) {
          const c = source[i]!;
          if (c === "`") template();
          else if (c === '"' || c === "'") quoted();
          else {
            if (c === "{") depth++;
            if (c === "}") depth--;
            i++;
          }
        }
      } else i++;
    }
    i++;
    return source.slice(start, i);
  };
  const quoted = (): string => {
    const quote = source[i]!;
    const start = i++;
    while (i < source.length && source[i] !== quote && source[i] !== "\n") i += source[i] === "\\" ? 2 : 1;
    i++;
    return source.slice(start, i);
  };
  while (i < source.length) {
    const c = source[i]!;
    if (c === "/" && source[i + 1] === "/") i = source.indexOf("\n", i) === -1 ? source.length : source.indexOf("\n", i);
    else if (c === "/" && source[i + 1] === "*") i = source.indexOf("*/", i + 2) + 2;
    else if (c === "`" || c === '"' || c === "'") {
      const before = source.slice(Math.max(0, i - 20), i);
      found.push({ text: c === "`" ? template() : quoted(), before });
    } else i++;
  }
  return found;
}

const TABLE_USE = new RegExp(`\\b(from|join|into|update|delete\\s+from)\\s+(ledger\\.)?(${MONEY_TABLES.join("|")})\\b`, "i");

/** The SQL texts of `source` that use a money table and never mention account_id. */
function statementsWithoutAccount(source: string): string[] {
  return literalsOf(source)
    .filter(({ text, before }) => TABLE_USE.test(text) && !/\baccount_id\b/.test(text) && !/\bselect:\s*$/.test(before))
    .map(({ text }) => text);
}

describe("money statements name their account", () => {
  it("finds a statement without the account, and passes one with it (the check can fail)", () => {
    // TypeScript source as text, its placeholders spelled #{ (a plain string may not spell them).
    const dollar = (text: string) => text.replaceAll("#{", "${");
    const source = dollar(
      [
        "// a comment with `update entities set x` in it",
        "const a = await sql`update entities set held = 0 where id = #{id}`;",
        "const b = await sql`select * from legs where account_id = #{account} and id = #{id}`;",
        'const c = sql.unsafe("delete from balance_alerts where id = $1");',
        "const d = sql`select 1 from entities e #{where ? sql`where e.account_id = #{a}` : sql``}`;",
        'const q = new ListQuery({ select: "select * from entities", account: { column: "account_id", id } });',
      ].join("\n"),
    );
    expect(statementsWithoutAccount(source)).toEqual([
      dollar("`update entities set held = 0 where id = #{id}`"),
      '"delete from balance_alerts where id = $1"',
    ]);
  });

  it("holds for every SQL text of the ledger service", async () => {
    const files = (await readdir(SOURCE)).filter((f) => f.endsWith(".ts") && !f.endsWith(".test.ts"));
    expect(files.length).toBeGreaterThan(20);
    const missing: string[] = [];
    let checked = 0;
    for (const file of files) {
      const source = await readFile(join(SOURCE, file), "utf8");
      checked += literalsOf(source).filter(({ text }) => TABLE_USE.test(text)).length;
      for (const statement of statementsWithoutAccount(source)) missing.push(`${file}: ${statement.slice(0, 160)}`);
    }
    expect(missing).toEqual([]);
    // The scan saw the service's statements (the write statement, loads, lists, history, alerts...).
    expect(checked).toBeGreaterThan(30);
  });
});
