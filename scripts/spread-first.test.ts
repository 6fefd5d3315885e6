import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
// TypeScript 7 ships no compiler API; its 6.0 package, installed beside it, does (docs/dependencies.md).
import ts from "@typescript/typescript6";
import { describe, expect, it } from "vitest";

// No object literal in the services' code starts with a spread and goes on with more properties
// (`{ ...row, status: "done" }`). On Node 20's V8 such a literal gets a hidden class of its own on
// every evaluation, one for each property after the spread: maps and descriptor arrays allocated in
// the old generation, which made a large part of what fills it per transfer, and so of the full
// collections behind the tail latency (docs/decisions/hidden-classes-per-call.md). Write the
// fields out, put the spread after them, or use `Object.assign({}, row, { status: "done" })`.

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const SOURCE_DIRS = ["packages", "services", "gateway"].map((dir) => join(ROOT, dir));

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    if (["node_modules", "dist", "gen"].includes(entry.name)) return [];
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sourceFiles(path);
    const test = /\.test\.ts$|\.testing\.ts$/.test(entry.name) || path.includes(join("packages", "testing"));
    return entry.name.endsWith(".ts") && !entry.name.endsWith(".d.ts") && !test ? [path] : [];
  });
}

/** Each object literal of `source` that starts with a spread and has properties after it, as `line: text`. */
function spreadFirstLiterals(source: string, fileName = "source.ts"): string[] {
  const file = ts.createSourceFile(fileName, source, ts.ScriptTarget.Latest, true);
  const found: string[] = [];
  const visit = (node: ts.Node): void => {
    if (ts.isObjectLiteralExpression(node) && node.properties.length > 1 && ts.isSpreadAssignment(node.properties[0]!)) {
      const { line } = file.getLineAndCharacterOfPosition(node.getStart(file));
      found.push(`${line + 1}: ${node.getText(file).replace(/\s+/g, " ").slice(0, 80)}`);
    }
    ts.forEachChild(node, visit);
  };
  visit(file);
  return found;
}

describe("object literals that start with a spread", () => {
  it("are found, and only those", () => {
    const source = [
      "const a = { ...row, status: 'done' };",
      "const b = {\n  ...(c ? { x } : {}),\n  y: 1,\n};",
      "const c = { x: 1, ...row };",
      "const d = { ...row };",
      "const e = { x: 1, ...row, y: 2 };",
      "f({ id, data: { ...inner, z } });",
    ].join("\n");
    expect(spreadFirstLiterals(source)).toEqual([
      "1: { ...row, status: 'done' }",
      "2: { ...(c ? { x } : {}), y: 1, }",
      "9: { ...inner, z }",
    ]);
  });

  it("are not in the services' source", () => {
    const files = SOURCE_DIRS.flatMap(sourceFiles);
    expect(files.length).toBeGreaterThan(50);
    const offending = files.flatMap((file) =>
      spreadFirstLiterals(readFileSync(file, "utf8"), file).map((at) => `${relative(ROOT, file)}:${at}`),
    );
    expect(offending).toEqual([]);
  });
});
