// Builds what `pnpm pack` ships: ESM in dist/esm and CommonJS in dist/cjs, each with its
// declarations, compiled by tsc from src/. Inside the workspace the package is used from its
// TypeScript source (see "exports"), so nothing here runs before the tests; the packed
// package.json takes "exports" from "publishConfig" instead, which points at dist/.
import { execFileSync } from "node:child_process";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";

// npm pack runs this too but ignores publishConfig, so its tarball would export src/index.ts,
// which it does not contain: refuse rather than ship a package that cannot be imported.
const agent = process.env.npm_config_user_agent ?? "";
if (process.env.npm_lifecycle_event === "prepack" && !agent.startsWith("pnpm/")) {
  console.error("@ledger/webhooks: pack it with pnpm (pnpm pack), which applies publishConfig.exports; npm pack does not.");
  process.exit(1);
}

const here = new URL(".", import.meta.url);
// TypeScript's compiler as its package.json names it ("bin"): the package exports no path to it.
const manifest = createRequire(import.meta.url).resolve("typescript/package.json");
const tsc = join(dirname(manifest), JSON.parse(readFileSync(manifest, "utf8")).bin.tsc);
const compile = (project) => execFileSync(process.execPath, [tsc, "-p", project], { cwd: here, stdio: "inherit" });

rmSync(new URL("dist", here), { recursive: true, force: true });
compile("tsconfig.esm.json");
compile("tsconfig.cjs.json");
// The package is "type": "module"; this marks dist/cjs's .js files as CommonJS for Node and TypeScript.
writeFileSync(new URL("dist/cjs/package.json", here), '{ "type": "commonjs" }\n');
