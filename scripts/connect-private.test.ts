import { readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { sourceFiles, specifiers, withoutComments } from "./source-imports.js";

// Connect's names that Connect does not document as public live in one package,
// packages/connect-fast (docs/dependencies.md, "Connect's private names"): an upgrade of Connect
// then has one place to check. Any other file that reaches them fails here.

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..");
/** The one package allowed them, code nobody writes by hand, and this test, which names them. */
const ALLOWED = [
  join(ROOT, "packages/connect-fast"),
  join(ROOT, "proto/gen"),
  join(ROOT, "bench/results"),
  join(ROOT, "test-output"),
  fileURLToPath(import.meta.url),
];

/**
 * Connect's documented entry points are its packages' roots: a path below one (the protocol
 * modules, `@connectrpc/connect/protocol-connect`, `dist/...`) is internal code, "not following
 * semantic versioning" in Connect's own words.
 */
const PRIVATE_PATH = /^@connectrpc\/[^/]+\/./;

/** Exported from a package's root, yet not documented for use, or marked @private there. */
const PRIVATE_NAMES = [
  // @connectrpc/connect: what the framework adapters build routers with.
  "createServiceImplSpec",
  "createMethodImplSpec",
  "ServiceImplSpec",
  "MethodImplSpec",
  // @connectrpc/connect-node: the universal layer's plumbing.
  "universalRequestFromNodeRequest",
  "universalResponseToNodeResponse",
  "createNodeHttpClient",
  "NodeHttpClientOptions",
];
const PRIVATE_NAME = new RegExp(`\\b(?:${PRIVATE_NAMES.join("|")})\\b`, "g");

/** What of Connect's private code `source` reaches: paths it imports, and private names it uses beside an import of Connect. */
function privateUses(source: string): string[] {
  const modules = specifiers(source);
  const paths = modules.filter((specifier) => PRIVATE_PATH.test(specifier));
  if (!modules.some((specifier) => specifier.startsWith("@connectrpc/"))) return paths;
  const names = [...new Set([...withoutComments(source).matchAll(PRIVATE_NAME)].map((match) => match[0]))];
  return [...paths, ...names];
}

describe("Connect's private names are used only in packages/connect-fast", () => {
  it("in every source file of the repository but that package", () => {
    const files = sourceFiles(ROOT, (path) => ALLOWED.includes(path));
    expect(files.length).toBeGreaterThan(100);
    const offending = files.flatMap((file) => privateUses(readFileSync(file, "utf8")).map((use) => `${relative(ROOT, file)}: ${use}`));
    expect(offending).toEqual([]);
  });

  it("catches what it looks for", () => {
    const uses = privateUses(
      [
        `import { errorToJsonBytes, trailerDemux } from "@connectrpc/connect/protocol-connect";`,
        `import type { UniversalClientFn } from '@connectrpc/connect/protocol';`,
        `const lookup = await import("@connectrpc/connect/dist/esm/protocol/serialization.js");`,
        `import { createServiceImplSpec, type MethodImplSpec } from "@connectrpc/connect";`,
        `import * as node from "@connectrpc/connect-node"; node.universalRequestFromNodeRequest(req);`,
        `// createNodeHttpClient, in a comment, is no use.`,
      ].join("\n"),
    );
    expect(uses).toEqual([
      "@connectrpc/connect/protocol-connect",
      "@connectrpc/connect/protocol",
      "@connectrpc/connect/dist/esm/protocol/serialization.js",
      "createServiceImplSpec",
      "MethodImplSpec",
      "universalRequestFromNodeRequest",
    ]);
    expect(privateUses(`import { createClient, createRouterTransport } from "@connectrpc/connect";`)).toEqual([]);
    expect(privateUses(`import { createConnectTransport, Http2SessionManager } from "@connectrpc/connect-node";`)).toEqual([]);
  });
});
