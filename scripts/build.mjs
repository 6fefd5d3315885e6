// Compiles every runnable entry point to JavaScript under dist/, so production runs plain
// `node dist/<name>.js`: no TypeScript loader, no transpiling at start, and a few modules to load
// instead of hundreds. `npm start` and the Docker image run this first; it takes about a second.
//
// Plain JavaScript on purpose: it must run before anything is compiled, with nothing but node.
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { basename, dirname, join, relative } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const OUT = join(ROOT, "dist");

/** dist/<name>.js from each entry. */
export const ENTRIES = {
  "start-all": "scripts/start-all.ts",
  ledger: "services/ledger/src/main.ts",
  "ledger-cli": "services/ledger/src/cli.ts",
  hold: "services/hold/src/main.ts",
  notification: "services/notification/src/main.ts",
  gateway: "gateway/src/main.ts",
  migrate: "deploy/migrate.ts",
};

/**
 * Source files find what sits beside them (migrations, openapi.yaml, the console, swagger-ui-dist
 * through their package's node_modules) from `import.meta.url`. In a bundle that URL would be the
 * bundle's, so each such file gets its own back: its path relative to dist/, resolved at run time,
 * which keeps dist/ working wherever the repository (or the image's /app) is.
 */
const ownImportMetaUrl = {
  name: "own-import-meta-url",
  setup(b) {
    b.onLoad({ filter: /\.ts$/ }, (args) => {
      if (args.path.includes("node_modules")) return undefined;
      const source = readFileSync(args.path, "utf8");
      if (!source.includes("import.meta.url")) return { contents: source, loader: "ts" };
      const fromDist = relative(OUT, args.path).split("\\").join("/");
      return {
        contents: source.replaceAll("import.meta.url", `new URL(${JSON.stringify(fromDist)}, import.meta.url).href`),
        loader: "ts",
      };
    });
  },
};

/**
 * V8 keeps every module's source text in its heap for the life of the process, one byte a
 * character when the text is all ASCII and two bytes otherwise: three non-ASCII characters in
 * NATS's code (two in comments, one in a regular expression) doubled the text of the chunk holding
 * it, about 1.2 MB more heap in every process. esbuild escapes strings and templates but leaves
 * comments and regular expressions as written; there `\uXXXX` means the same character, so those
 * are escaped here: whole comment lines, and a regular expression literal on a line without a
 * backquote (a tagged template's raw text keeps its characters as written, and an escape would
 * change it). Anything else stays as it is and is reported; scripts/build.test.ts checks that
 * dist/ is ASCII.
 */
const NON_ASCII = /[\u0080-\uffff]/g;
const HAS_NON_ASCII = /[\u0080-\uffff]/;
const COMMENT_LINE = /^\s*(\/\/|\/\*|\*)/;
const REGEXP_WITH_NON_ASCII = /\/(?:[^/\n\\]|\\.)*[\u0080-\uffff](?:[^/\n\\]|\\.)*\/[dgimsuvy]*/g;
const escapeNonAscii = (text) => text.replace(NON_ASCII, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);

export function asciiSource(text, path = "") {
  return text
    .split("\n")
    .map((line) => {
      if (!HAS_NON_ASCII.test(line)) return line;
      const escaped = COMMENT_LINE.test(line)
        ? escapeNonAscii(line)
        : line.includes("`")
          ? line
          : line.replace(REGEXP_WITH_NON_ASCII, escapeNonAscii);
      if (HAS_NON_ASCII.test(escaped)) console.error(`build: ${basename(path)} keeps a non-ASCII character: ${line.trim().slice(0, 100)}`);
      return escaped;
    })
    .join("\n");
}

/** Records every input of the last build, so the next `npm start` can skip an unchanged build. */
const INPUTS = join(OUT, "inputs.json");

/**
 * Whether dist/ is as new as everything it was built from: each entry's output exists and no input
 * (source, dependency, this script, the lockfile) changed since. Stat calls only, a few milliseconds.
 */
export function isCurrent() {
  if (!existsSync(INPUTS)) return false;
  const builtAt = statSync(INPUTS).mtimeMs;
  const { inputs, outputs = [] } = JSON.parse(readFileSync(INPUTS, "utf8"));
  for (const name of Object.keys(ENTRIES)) if (!existsSync(join(OUT, `${name}.js`))) return false;
  for (const file of outputs) if (!existsSync(join(OUT, file))) return false;
  for (const file of [...inputs, "scripts/build.mjs", "pnpm-lock.yaml"]) {
    try {
      if (statSync(join(ROOT, file)).mtimeMs > builtAt) return false;
    } catch {
      return false;
    }
  }
  return true;
}

export async function buildAll() {
  const started = performance.now();
  // Loaded only to build: `--if-changed` on an unchanged tree answers without it.
  const { build } = await import("esbuild");
  const { parse } = await import("yaml");
  // The gateway serves its OpenAPI document as JSON; parsing the YAML at every start cost 0.4 s,
  // so it is parsed here, once, and compiled in (gateway/src/docs.ts reads the definition).
  const openApiJson = JSON.stringify(parse(readFileSync(join(ROOT, "gateway/openapi.yaml"), "utf8")));
  const result = await build({
    metafile: true,
    absWorkingDir: ROOT,
    entryPoints: ENTRIES,
    outdir: OUT,
    bundle: true,
    platform: "node",
    format: "esm",
    // Code reached only through `import()` goes to a chunk of its own, loaded when the import runs:
    // the OpenTelemetry SDK and exporters (packages/common/src/tracing.ts) are about a third of a
    // service's code, and a process that does not trace no longer reads or parses them. Code that
    // several entry points share goes to shared chunks; each process loads only what it imports.
    splitting: true,
    target: "node20",
    sourcemap: "linked",
    // PGlite loads its WebAssembly and data files from its own folder: it stays in node_modules
    // (only `npm start` on a machine without PostgreSQL uses it).
    external: ["@electric-sql/pglite", "@electric-sql/pglite/*"],
    // Bundled CommonJS packages (pino, postgres' peers, prom-client) call require for node's modules.
    banner: { js: 'import { createRequire as __createRequire } from "node:module"; const require = __createRequire(import.meta.url);' },
    plugins: [ownImportMetaUrl],
    define: { __LEDGER_OPENAPI_JSON__: JSON.stringify(openApiJson) },
    logLevel: "warning",
    write: false,
    // No keepNames: nothing is minified, so names survive anyway, and its __name() call on every
    // closure a request creates cost 0.6% of the one process's CPU in a profile.
  });
  const written = new Set();
  for (const file of result.outputFiles) {
    mkdirSync(dirname(file.path), { recursive: true });
    writeFileSync(file.path, file.path.endsWith(".js") ? asciiSource(file.text, file.path) : file.contents);
    written.add(relative(OUT, file.path));
  }
  // Chunks are named by their content's hash: remove the previous builds' chunks and maps.
  for (const name of readdirSync(OUT)) {
    if (/\.js(\.map)?$/.test(name) && !written.has(name)) rmSync(join(OUT, name));
  }
  // openapi.yaml is read by this script, not imported, so esbuild does not list it.
  writeFileSync(
    INPUTS,
    JSON.stringify({ inputs: [...Object.keys(result.metafile.inputs), "gateway/openapi.yaml"], outputs: [...written] }),
  );
  return Math.round(performance.now() - started);
}

// `node scripts/build.mjs` builds; with --if-changed (what `npm start` runs) only when an input changed.
if (process.argv[1] && pathToFileURL(process.argv[1]).href === import.meta.url) {
  if (process.argv.includes("--if-changed") && isCurrent()) process.exit(0);
  const ms = await buildAll();
  console.error(`build: ${Object.keys(ENTRIES).length} entry points compiled to ${relative(process.cwd(), OUT) || "."}/ in ${ms} ms`);
}
