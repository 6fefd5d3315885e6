import { execFileSync } from "node:child_process";
import { createHmac } from "node:crypto";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
// TypeScript 7 ships no compiler API; its 6.0 package, installed beside it, does (docs/dependencies.md).
import ts from "@typescript/typescript6";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

// The package as a receiver gets it: `pnpm pack` (which builds it), installed with npm into a
// directory that has no workspace around it, then loaded by plain Node with `import` and with
// `require`, and type-checked by a consumer with TypeScript's Node resolution.

const PACKAGE_DIR = fileURLToPath(new URL("..", import.meta.url));
// TypeScript's compiler as its package.json names it ("bin"): the package exports no path to it.
const TS_MANIFEST = createRequire(import.meta.url).resolve("typescript/package.json");
const TSC = join(dirname(TS_MANIFEST), JSON.parse(readFileSync(TS_MANIFEST, "utf8")).bin.tsc);

let dir: string;
let tarball: string;

function run(command: string, args: string[], cwd: string, env: Record<string, string> = {}): string {
  return execFileSync(command, args, {
    cwd,
    encoding: "utf8",
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, npm_config_update_notifier: "false", ...env },
  });
}

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "ledger-webhooks-pack-"));
  const packs = join(dir, "packs");
  run("pnpm", ["pack", "--pack-destination", packs], PACKAGE_DIR);
  tarball = join(packs, readdirSync(packs).find((f) => f.endsWith(".tgz"))!);
  const app = join(dir, "app");
  run("mkdir", ["-p", app], dir);
  writeFileSync(join(app, "package.json"), JSON.stringify({ name: "receiver", version: "1.0.0", private: true }));
  // --offline: the package has no dependencies, so installing it must not need a registry.
  run("npm", ["install", "--offline", "--no-audit", "--no-fund", "--ignore-scripts", tarball], app);
}, 120_000);

afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

// A delivery signed the way the notification service signs it: HMAC-SHA256(secret, "<t>.<body>").
const secret = "whsec_c2VjcmV0LWZvci10aGUtcGFjay10ZXN0";
const body = JSON.stringify({ id: "evt_pack", type: "transaction.created", created: 1_800_000_000, data: { amount: 5 } });
const t = Math.floor(Date.now() / 1000);
const header = `t=${t},v1=${createHmac("sha256", secret).update(`${t}.${body}`).digest("hex")}`;
const input = JSON.stringify({ body, header, secret });

describe("the packed @ledger/webhooks", () => {
  it("holds compiled JavaScript, declarations and a README, no sources or tests, and no dependencies", () => {
    const files = run("tar", ["-tzf", tarball], dir).trim().split("\n").sort();
    expect(files).toEqual(
      expect.arrayContaining([
        "package/README.md",
        "package/package.json",
        "package/dist/esm/index.js",
        "package/dist/esm/index.d.ts",
        "package/dist/cjs/index.js",
        "package/dist/cjs/index.d.ts",
        "package/dist/cjs/package.json",
      ]),
    );
    expect(files.filter((f) => /\.test\.|\/src\/|\.ts$/.test(f) && !f.endsWith(".d.ts"))).toEqual([]);
    const manifest = JSON.parse(run("tar", ["-xzOf", tarball, "package/package.json"], dir));
    expect(manifest.dependencies ?? {}).toEqual({});
    expect(manifest.private).toBeUndefined();
    expect(JSON.stringify(manifest.exports)).not.toContain("src/");
  });

  it("verifies a real signature through `import` in plain Node and refuses a tampered body", () => {
    const script = `
      import { verifyWebhook, WebhookVerificationError } from "@ledger/webhooks";
      const { body, header, secret } = JSON.parse(process.argv[2]);
      const event = verifyWebhook(body, header, secret);
      let reason = "accepted";
      try { verifyWebhook(body.replace("5", "6"), header, secret); } catch (e) { reason = e instanceof WebhookVerificationError ? e.reason : String(e); }
      console.log(JSON.stringify({ id: event.id, reason, url: import.meta.resolve("@ledger/webhooks") }));`;
    writeFileSync(join(dir, "app", "check.mjs"), script);
    const out = JSON.parse(run(process.execPath, ["check.mjs", input], join(dir, "app")));
    expect(out).toMatchObject({ id: "evt_pack", reason: "no_matching_signature" });
    expect(out.url).toMatch(/node_modules\/@ledger\/webhooks\/dist\/esm\/index\.js$/);
  });

  it("verifies a real signature through `require` in plain Node and refuses a stale timestamp", () => {
    const script = `
      const { verifyWebhook, WebhookVerificationError } = require("@ledger/webhooks");
      const { body, header, secret } = JSON.parse(process.argv[2]);
      const event = verifyWebhook(body, header, [secret, "whsec_previous"]);
      let reason = "accepted";
      try { verifyWebhook(body, header, secret, { now: Date.now() / 1000 + 3600 }); } catch (e) { reason = e instanceof WebhookVerificationError ? e.reason : String(e); }
      console.log(JSON.stringify({ id: event.id, reason, path: require.resolve("@ledger/webhooks") }));`;
    writeFileSync(join(dir, "app", "check.cjs"), script);
    const out = JSON.parse(run(process.execPath, ["check.cjs", input], join(dir, "app")));
    expect(out).toMatchObject({ id: "evt_pack", reason: "timestamp_out_of_tolerance" });
    expect(out.path).toMatch(/node_modules\/@ledger\/webhooks\/dist\/cjs\/index\.js$/);
  });

  it("runs the README's fetch-style (Next.js route handler) example as written", async () => {
    // The README's code block, compiled from TypeScript as a Next.js app would, with handleOnce
    // (the receiver's own code) recording what it was given.
    const readme = readFileSync(join(PACKAGE_DIR, "README.md"), "utf8");
    const block = /```ts\n(\/\/ app\/webhooks\/ledger\/route\.ts[\s\S]*?)```/.exec(readme)?.[1];
    expect(block).toBeDefined();
    const js = ts.transpileModule(block!, { compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 } }).outputText;
    writeFileSync(
      join(dir, "app", "route.mjs"),
      `export const handled = [];\nconst handleOnce = async (id) => { handled.push(id); };\n${js}`,
    );
    const driver = `
      import { POST, handled } from "./route.mjs";
      const { body, header } = JSON.parse(process.argv[2]);
      const send = (raw) => POST(new Request("https://receiver.example/webhooks/ledger", { method: "POST", headers: { "content-type": "application/json", "x-service-signature": header }, body: raw }));
      const good = await send(body);
      const bad = await send(body + " ");
      console.log(JSON.stringify({ good: good.status, bad: bad.status, reason: await bad.text(), handled }));`;
    writeFileSync(join(dir, "app", "fetch.mjs"), driver);
    const out = JSON.parse(run(process.execPath, ["fetch.mjs", input], join(dir, "app"), { WEBHOOK_SECRET: secret }));
    expect(out).toEqual({ good: 204, bad: 400, reason: "no_matching_signature", handled: ["evt_pack"] });
  });

  it("gives TypeScript consumers their types, for ESM and CommonJS alike", () => {
    const app = join(dir, "app");
    const consumer = (from: string) => `
      ${from}
      const event = verifyWebhook<{ id: string }>("{}", "t=1,v1=00", ["whsec_x"], { toleranceSeconds: 60 });
      const id: string = event.id;
      const reason: "malformed_header" | "timestamp_out_of_tolerance" | "no_matching_signature" | "no_secret" = new WebhookVerificationError("no_secret", "m").reason;
      // @ts-expect-error the options are typed
      verifyWebhook("{}", undefined, "whsec_x", { tolerance: 1 });
      export { id, reason };`;
    writeFileSync(join(app, "esm.mts"), consumer(`import { verifyWebhook, WebhookVerificationError } from "@ledger/webhooks";`));
    writeFileSync(
      join(app, "cjs.cts"),
      consumer(`import hooks = require("@ledger/webhooks");\nconst { verifyWebhook, WebhookVerificationError } = hooks;`),
    );
    // "types": [] because the declarations must not need @types/node, which a receiver may not have.
    const compilerOptions = {
      noEmit: true,
      strict: true,
      module: "nodenext",
      moduleResolution: "nodenext",
      target: "es2022",
      types: [],
      skipLibCheck: false,
    };
    writeFileSync(join(app, "tsconfig.json"), JSON.stringify({ compilerOptions, files: ["esm.mts", "cjs.cts"] }));
    let errors = "";
    try {
      run(process.execPath, [TSC, "-p", "tsconfig.json"], app);
    } catch (err) {
      errors = String((err as { stdout?: string }).stdout || err);
    }
    expect(errors).toBe("");
  }, 120_000);
});
