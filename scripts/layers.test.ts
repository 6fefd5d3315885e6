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
