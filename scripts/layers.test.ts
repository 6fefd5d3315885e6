import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { sourceFiles, specifiers } from "./source-imports.js";

// The layers of the workspace (docs/architecture.md#code-layout): packages/ is shared code the
// services and the gateway build on, so it must depend on none of them, and neither on e2e/, which
// starts them all. Otherwise a change to a service could break the layer beneath it.

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const PACKAGES = join(ROOT, "packages");
/** What packages/ must not reach: a service, the gateway, or the end-to-end harness over them. */
const UPPER = /^@ledger\/(?:[a-z-]+-service|gateway|e2e)(?:\/|$)/;
const UPPER_DIRS = ["services", "gateway", "e2e"].map((dir) => join(ROOT, dir));

describe("packages/ depends on no service, no gateway and no e2e", () => {
  const packages = readdirSync(PACKAGES, { withFileTypes: true }).filter((entry) => entry.isDirectory());

  it("finds the packages", () => {
    expect(packages.map((entry) => entry.name)).toEqual(expect.arrayContaining(["common", "testing"]));
  });

  it("in any package.json", () => {
    const offending: string[] = [];
    for (const entry of packages) {
      const manifest = JSON.parse(readFileSync(join(PACKAGES, entry.name, "package.json"), "utf8")) as Record<string, unknown>;
      for (const field of ["dependencies", "devDependencies", "peerDependencies", "optionalDependencies"]) {
        for (const name of Object.keys((manifest[field] as Record<string, string> | undefined) ?? {})) {
          if (UPPER.test(name)) offending.push(`packages/${entry.name}/package.json ${field}: ${name}`);
        }
      }
    }
    expect(offending).toEqual([]);
  });

  it("in any import", () => {
    const offending: string[] = [];
    for (const file of sourceFiles(PACKAGES)) {
      for (const specifier of specifiers(readFileSync(file, "utf8"))) {
        const reachesUp =
          specifier.startsWith(".") && UPPER_DIRS.some((dir) => !relative(dir, resolve(dirname(file), specifier)).startsWith(".."));
        if (UPPER.test(specifier) || reachesUp) offending.push(`${relative(ROOT, file)}: ${specifier}`);
      }
    }
    expect(offending).toEqual([]);
  });

  it("catches what it looks for", () => {
    expect(
      specifiers(`import { a } from "@ledger/gateway";\nexport * from '@ledger/hold-service';\nawait import("@ledger/e2e")`).filter((s) =>
        UPPER.test(s),
      ),
    ).toHaveLength(3);
    expect(UPPER.test("@ledger/common")).toBe(false);
    expect(UPPER.test("@ledger/webhooks")).toBe(false);
  });
});

// Within the workspace, no module imports itself back through others: in a loop of imports no
// file can be read, tested or moved without the rest of the loop, and whichever loads first sees
// the others half-initialised. What two modules both need goes in a third, below them.

const CYCLE_DIRS = ["packages", "services", "gateway", "e2e", "bench", "scripts", "deploy"].map((dir) => join(ROOT, dir));

/** The workspace file a relative specifier names (`./x.js` is `./x.ts` in the source), if any. */
function resolveRelative(from: string, specifier: string, known: Set<string>): string | undefined {
  const base = resolve(dirname(from), specifier);
  return [base, base.replace(/\.js$/, ".ts"), base.replace(/\.mjs$/, ".mts"), `${base}.ts`].find((path) => known.has(path));
}

/** Each loop of imports among `graph`'s files (Tarjan's strongly connected components of more than one file). */
function importLoops(graph: Map<string, string[]>): string[][] {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const loops: string[][] = [];
  const visit = (file: string): void => {
    index.set(file, index.size);
    low.set(file, index.get(file)!);
    stack.push(file);
    onStack.add(file);
    for (const next of graph.get(file) ?? []) {
      if (!index.has(next)) {
        visit(next);
        low.set(file, Math.min(low.get(file)!, low.get(next)!));
      } else if (onStack.has(next)) low.set(file, Math.min(low.get(file)!, index.get(next)!));
    }
    if (low.get(file) !== index.get(file)) return;
    const component: string[] = [];
    let member: string;
    do {
      member = stack.pop()!;
      onStack.delete(member);
      component.push(member);
    } while (member !== file);
    if (component.length > 1) loops.push(component.sort());
  };
  for (const file of graph.keys()) if (!index.has(file)) visit(file);
  return loops;
}

describe("imports between the workspace's files", () => {
  it("find a loop, and only a loop", () => {
    const graph = new Map([
      ["a", ["b"]],
      ["b", ["c"]],
      ["c", ["a", "d"]],
      ["d", []],
      ["e", ["d"]],
    ]);
    expect(importLoops(graph)).toEqual([["a", "b", "c"]]);
  });

  it("make no loop", () => {
    const files = CYCLE_DIRS.flatMap((dir) => sourceFiles(dir)).filter((path) => !/\.test\.ts$/.test(path));
    expect(files.length).toBeGreaterThan(100);
    const known = new Set(files);
    const graph = new Map(
      files.map((file) => [
        file,
        specifiers(readFileSync(file, "utf8")).flatMap((specifier) => {
          const target = specifier.startsWith(".") ? resolveRelative(file, specifier, known) : undefined;
          return target ? [target] : [];
        }),
      ]),
    );
    expect(importLoops(graph).map((loop) => loop.map((file) => relative(ROOT, file)))).toEqual([]);
  });
});
