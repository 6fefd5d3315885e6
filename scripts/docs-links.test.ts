import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { ENTRIES } from "./build.mjs";
import { anchorsOf, brokenLinks, headingSlug, relativeLinks } from "./markdown-links.js";

// The repository explains itself: every relative link in its Markdown reaches a file (and, with a
// `#fragment`, a heading of that file), and no comment sends a reader to a document a clone does
// not have (design notes kept outside the repository, issue numbers of a tracker). Comments point
// into docs/ instead, or state the rule.

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..");

/** Tracked files, so build output and node_modules never count. */
function trackedFiles(): string[] {
  return execFileSync("git", ["ls-files", "-z"], { cwd: ROOT, encoding: "utf8" })
    .split("\0")
    .filter((file) => file !== "" && existsSync(join(ROOT, file)));
}

// Built from pieces so that this file does not match itself.
const OUTSIDE_DOCUMENTS = [
  new RegExp(["\\b(SPEC", "DESIGN", "STYLE)\\.md\\b"].join("|")),
  new RegExp("\\.\\./" + "shared\\b"),
  new RegExp("\\b[Ii]ssues? #?" + "[0-9]+"),
];
// Names of particular machines have no place in docs others read.
const MACHINE_NAMES = [new RegExp("\\bnode" + "-svc\\b")];

const SOURCE = /\.(ts|mts|cts|js|mjs|cjs|sh|sql|ya?ml|proto|css|html)$|(^|\/)(Dockerfile|run)$/;

/** A command run inside the container image, which has neither sources, tsx nor pnpm. */
const IN_CONTAINER = /\bkubectl\b.*\bexec\b|\bdocker (run|exec)\b/;
const NEEDS_SOURCES = /\btsx\b|--import\b|\bpnpm\b|\.ts\b/;

/**
 * Where `text` (a doc, the Dockerfile, a manifest) tells to run something the image cannot: a
 * compiled `dist/<name>.js` that scripts/build.mjs does not build, or a command in a container
 * that needs the TypeScript sources.
 */
function containerCommandProblems(file: string, text: string, entries: string[]): string[] {
  const problems: string[] = [];
  text.split("\n").forEach((line, i) => {
    for (const [, name] of line.matchAll(/\bdist\/([\w-]+)\.js\b/g)) {
      if (!entries.includes(name!)) problems.push(`${file}:${i + 1}: dist/${name}.js is not built`);
    }
    if (IN_CONTAINER.test(line) && NEEDS_SOURCES.test(line))
      problems.push(`${file}:${i + 1}: needs sources in a container: ${line.trim()}`);
  });
  return problems;
}

describe("documentation", () => {
  const files = trackedFiles();
  const markdown = files.filter((file) => file.endsWith(".md"));

  it("has the docs every comment and the README point to", () => {
    for (const doc of ["architecture", "api", "webhooks", "configuration", "operations"]) {
      expect(markdown, `docs/${doc}.md`).toContain(`docs/${doc}.md`);
    }
  });

  it("has no relative link in its Markdown that misses its file or heading", () => {
    const problems = markdown.flatMap((file) => brokenLinks(ROOT, file));
    expect(problems).toEqual([]);
  });

  it("cites no document outside the repository and no issue number, in code or Markdown", () => {
    const problems: string[] = [];
    for (const file of files) {
      if (file.startsWith("proto/gen/") || file === "pnpm-lock.yaml" || !(SOURCE.test(file) || file.endsWith(".md"))) continue;
      readFileSync(join(ROOT, file), "utf8")
        .split("\n")
        .forEach((line, i) => {
          const patterns = file.endsWith(".md") ? [...OUTSIDE_DOCUMENTS, ...MACHINE_NAMES] : OUTSIDE_DOCUMENTS;
          if (patterns.some((pattern) => pattern.test(line))) problems.push(`${file}:${i + 1}: ${line.trim()}`);
        });
    }
    expect(problems).toEqual([]);
  });

  it("runs only what the image holds: compiled entry points, never tsx or pnpm in a container", () => {
    // packages/webhooks builds a dist/ of its own for receivers; the rest is the image's.
    const checked = files.filter(
      (file) =>
        (file.endsWith(".md") || file === "Dockerfile" || (file.startsWith("deploy/") && /\.ya?ml$/.test(file))) &&
        !file.startsWith("packages/webhooks/"),
    );
    const problems = checked.flatMap((file) =>
      containerCommandProblems(file, readFileSync(join(ROOT, file), "utf8"), Object.keys(ENTRIES)),
    );
    expect(problems).toEqual([]);
    // The CLI, which an operator runs by hand in a pod, is among the entries the image's build compiles.
    expect(ENTRIES["ledger-cli"]).toBe("services/ledger/src/cli.ts");
    expect(readFileSync(join(ROOT, "Dockerfile"), "utf8")).toMatch(/RUN .*node scripts\/build\.mjs/);
    // And the check can fail.
    expect(
      containerCommandProblems(
        "x.md",
        "kubectl -n ledger exec deploy/ledger -- node --import tsx services/ledger/src/cli.ts accounts list\nnode dist/nothing.js",
        Object.keys(ENTRIES),
      ),
    ).toEqual([
      "x.md:1: needs sources in a container: kubectl -n ledger exec deploy/ledger -- node --import tsx services/ledger/src/cli.ts accounts list",
      "x.md:2: dist/nothing.js is not built",
    ]);
  });

  it("finds a broken link, a missing anchor and a citation when there is one", () => {
    // The checks themselves, on this repository's own files: a test that cannot fail proves nothing.
    expect(headingSlug("Tracing (OpenTelemetry)")).toBe("tracing-opentelemetry");
    expect(headingSlug("The `@ledger/webhooks` package")).toBe("the-ledgerwebhooks-package");
    expect(anchorsOf("# A\n## B\n## B\n```\n# not a heading\n```\n")).toEqual(new Set(["a", "b", "b-1"]));
    expect(relativeLinks("[a](docs/api.md#ids) `[b](x.md)` [c](https://example.com)\n```\n[d](y.md)\n```\n")).toEqual(["docs/api.md#ids"]);
    expect(OUTSIDE_DOCUMENTS.some((p) => p.test("// see " + "DESIGN" + ".md section 5"))).toBe(true);
    expect(OUTSIDE_DOCUMENTS.some((p) => p.test("// (" + "issue" + " 6)"))).toBe(true);
    expect(OUTSIDE_DOCUMENTS.some((p) => p.test("// docs/api.md#idempotency"))).toBe(false);
    const dir = mkdtempSync(join(tmpdir(), "docs-links-"));
    try {
      writeFileSync(join(dir, "a.md"), "# Top\n[ok](b.md#there) [self](#top) [gone](c.md) [no anchor](b.md#nowhere) [dir anchor](./#x)\n");
      writeFileSync(join(dir, "b.md"), "## There\n");
      expect(brokenLinks(dir, "a.md")).toEqual([
        "a.md: c.md (no such file)",
        "a.md: b.md#nowhere (no heading with that anchor in b.md)",
        "a.md: ./#x (an anchor into something that is not a Markdown file)",
      ]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
