// What the repository's source files import, for the tests that hold its layers
// (layers.test.ts) and keep Connect's private names in one package (connect-private.test.ts).
import { readdirSync } from "node:fs";
import { join } from "node:path";

/** Every JavaScript and TypeScript source under `dir`, without node_modules, dist, dot-directories and `skip`. */
export function sourceFiles(dir: string, skip: (path: string) => boolean = () => false): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    if (entry.name === "node_modules" || entry.name === "dist" || entry.name.startsWith(".")) return [];
    const path = join(dir, entry.name);
    if (skip(path)) return [];
    if (entry.isDirectory()) return sourceFiles(path, skip);
    return /\.(?:[cm]?[jt]s|tsx)$/.test(entry.name) && !entry.name.endsWith(".d.ts") ? [path] : [];
  });
}

/** Every module specifier of a source file: static and dynamic imports, re-exports, require. */
export function specifiers(source: string): string[] {
  const found: string[] = [];
  const pattern = /(?:\bfrom\s*|\bimport\s*\(\s*|\bimport\s+|\brequire\s*\(\s*)["']([^"']+)["']/g;
  for (const match of source.matchAll(pattern)) found.push(match[1]!);
  return found;
}

/** The source without its comments, roughly: enough that a name mentioned in a comment is not taken for a use. */
export function withoutComments(source: string): string {
  return source.replace(/\/\*[\s\S]*?\*\//g, "").replace(/(^|[^:"'`\\])\/\/.*$/gm, "$1");
}
