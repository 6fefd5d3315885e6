import { readFileSync } from "node:fs";
import { basename, dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
// TypeScript 7 ships no compiler API; its 6.0 package, installed beside it, does (docs/dependencies.md).
import ts from "@typescript/typescript6";
import { describe, expect, it } from "vitest";
import { sourceFiles } from "./source-imports.js";

// No hand-written function is longer than about a hundred lines, nested functions counted in the one
// that holds them: a closure that grows into a module hides its state, and a reader cannot hold it in
// their head (docs/architecture.md#code-layout). Generated code and tests are left out.

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const SOURCE_DIRS = ["packages", "services", "gateway", "e2e", "bench", "scripts", "deploy"];
const MAX_LINES = 100;

/** Functions allowed over the limit, with why. Keep this short. */
const ALLOWED: Record<string, string> = {
  "services/ledger/src/money-persist.ts persist":
    "most of it is the one write statement, which the design keeps whole (docs/decisions/single-write-statement.md)",
};

/** The hand-written sources under `dir`: no tests, test helpers, generated code or bench results. */
function handWritten(dir: string): string[] {
  const skip = (path: string) => ["gen", "results"].includes(basename(path));
  const excluded = /\.(test|testing)\.ts$|_pb\.ts$|\.d\.m?ts$|\.lua$/;
  return sourceFiles(dir, skip).filter((path) => /\.(ts|mts|mjs)$/.test(path) && !excluded.test(path));
}

function functionName(node: ts.Node, file: ts.SourceFile): string {
  const named = node as { name?: ts.Node };
  if (named.name) return named.name.getText(file);
  if (ts.isConstructorDeclaration(node)) return "constructor";
  const parent = node.parent;
  if (ts.isVariableDeclaration(parent) || ts.isPropertyAssignment(parent) || ts.isPropertyDeclaration(parent)) {
    return parent.name.getText(file);
  }
  return "(anonymous)";
}

/** Each function of `source` longer than `max` lines, as `name lines`. */
function longFunctions(source: string, max = MAX_LINES, fileName = "source.ts"): string[] {
  const file = ts.createSourceFile(fileName, source, ts.ScriptTarget.Latest, true);
  const found: string[] = [];
  const visit = (node: ts.Node): void => {
    if (ts.isFunctionLike(node) && (node as ts.FunctionLikeDeclaration).body) {
      const first = file.getLineAndCharacterOfPosition(node.getStart(file)).line;
      const last = file.getLineAndCharacterOfPosition(node.getEnd()).line;
      const lines = last - first + 1;
      if (lines > max) found.push(`${functionName(node, file)} ${lines}`);
    }
    ts.forEachChild(node, visit);
  };
  visit(file);
  return found;
}

describe("function length", () => {
  it("is measured from first line to last, nested functions included", () => {
    const body = (n: number) => Array.from({ length: n }, (_, i) => `  const v${i} = ${i};`).join("\n");
    const source = [
      `export function short() {\n${body(3)}\n}`,
      `export function long() {\n${body(4)}\n  const inner = () => {\n${body(4)}\n  };\n}`,
      `const arrow = async () => {\n${body(5)}\n};`,
      `class K {\n  method() {\n${body(5)}\n  }\n}`,
    ].join("\n");
    expect(longFunctions(source, 6)).toEqual(["long 12", "arrow 7", "method 7"]);
  });

  it("stays under the limit outside generated code and tests", () => {
    const files = SOURCE_DIRS.flatMap((dir) => handWritten(join(ROOT, dir)));
    expect(files.length).toBeGreaterThan(100);
    const offending = files.flatMap((path) =>
      longFunctions(readFileSync(path, "utf8"), MAX_LINES, path)
        .map((found) => `${relative(ROOT, path)} ${found}`)
        .filter((found) => !(found.slice(0, found.lastIndexOf(" ")) in ALLOWED)),
    );
    expect(offending).toEqual([]);
  });
});
