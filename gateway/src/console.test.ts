import { readdirSync, readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startHandlers, type Handlers } from "@ledger/e2e";
import { CONSOLE_CSP, CONSOLE_DIR } from "./console.js";
import { loadOpenApi } from "./openapi-source.js";

// The webhook console's files as the gateway serves them: no API key, no rate limit, a strict
// Content-Security-Policy on the page and every asset. What the page does is console-browser.test.ts.

// The gateway in front of the services' handlers in memory: serving files needs no database.
let handlers: Handlers;
let base: string;

beforeAll(async () => {
  // A tiny budget: the console's files must not spend it, nor be refused once it is spent.
  handlers = await startHandlers({ rateLimitPerSecond: 0.01, rateLimitBurst: 2 });
  base = handlers.restUrl.replace(/\/v1$/, "");
});
afterAll(async () => handlers?.close());

const FILES = [
  ["/console", "text/html"],
  ["/console/console.css", "text/css"],
  ["/console/console.js", "text/javascript"],
  ["/console/core.js", "text/javascript"],
  ["/console/ledger.js", "text/javascript"],
  ["/console/money.js", "text/javascript"],
  ["/console/chart.js", "text/javascript"],
] as const;

describe("GET /console", () => {
  it("serves the page and its assets without a key, with a strict CSP, nosniff and no framing", async () => {
    for (const [path, type] of FILES) {
      const res = await fetch(base + path);
      expect(res.status, path).toBe(200);
      expect(res.headers.get("content-type"), path).toContain(type);
      expect(res.headers.get("content-security-policy"), path).toBe(CONSOLE_CSP);
      expect(res.headers.get("x-content-type-options"), path).toBe("nosniff");
      expect(res.headers.get("referrer-policy"), path).toBe("no-referrer");
      expect(res.headers.get("x-frame-options"), path).toBe("DENY");
      expect((await res.text()).length, path).toBeGreaterThan(100);
    }
    expect(CONSOLE_CSP).toMatch(/default-src 'none'/);
    expect(CONSOLE_CSP).toMatch(/script-src 'self';/);
    expect(CONSOLE_CSP).toMatch(/require-trusted-types-for 'script'/);
    expect(CONSOLE_CSP).not.toMatch(/unsafe|\*|https?:/);
    const head = await fetch(`${base}/console/`, { method: "HEAD" });
    expect(head.status).toBe(200);
    expect(head.headers.get("content-security-policy")).toBe(CONSOLE_CSP);
  });

  it("names every event type a destination may subscribe to, as the OpenAPI description lists them", () => {
    const html = readFileSync(`${CONSOLE_DIR}/index.html`, "utf8");
    const hint = /<p id="create-types-help"[^>]*>(.*?)<\/p>/s.exec(html)![1]!;
    const named = [...hint.matchAll(/<code>([^<]+)<\/code>/g)].map((m) => m[1]);
    const schemas = (loadOpenApi()["components"] as { schemas: Record<string, { items: { enum: string[] } }> }).schemas;
    expect(named).toEqual(schemas["EventTypes"]!.items.enum);
  });

  it("is neither counted against nor refused by the rate limit, even with a spent key", async () => {
    const spent = { authorization: handlers.apiKey };
    // Calls the API refuses (no entity_id) still spend the key's budget.
    for (let i = 0; i < 4; i++) await fetch(`${base}/v1/entity`, { headers: spent });
    expect((await fetch(`${base}/v1/entity`, { headers: spent })).status).toBe(429);
    for (let i = 0; i < 10; i++) {
      for (const [path] of FILES) {
        expect((await fetch(base + path)).status, path).toBe(200);
        expect((await fetch(base + path, { headers: spent })).status, path).toBe(200);
      }
    }
  });

  it("leaves anything else under /console to the REST handler: an error envelope, never a file", async () => {
    // 404, or 429 once this address's tiny budget is spent: the REST handler's answers either way.
    for (const path of [
      "/console/nope.js",
      "/console/../package.json",
      "/console/index.html",
      "/console/%2e%2e/src/console.ts",
      "/console//console.js",
    ]) {
      const res = await fetch(base + path);
      expect([404, 429], path).toContain(res.status);
      expect(await res.json(), path).toMatchObject({ status: "error" });
      expect(res.headers.get("content-security-policy"), path).toBeNull();
    }
    const post = await fetch(`${base}/console`, { method: "POST", body: "x" });
    expect([404, 429]).toContain(post.status);
  });

  it("builds the page with DOM text only: no HTML parsing sinks, no inline script or style", () => {
    const modules = FILES.filter(([path]) => path.endsWith(".js")).map(([path]) => path.slice("/console/".length));
    // Every module in the directory is served, and every one is checked.
    expect(
      readdirSync(CONSOLE_DIR)
        .filter((f) => f.endsWith(".js"))
        .sort(),
    ).toEqual([...modules].sort());
    for (const file of modules) {
      const js = readFileSync(`${CONSOLE_DIR}/${file}`, "utf8");
      expect(js, file).not.toMatch(
        /innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(|new Function|localStorage|document\.cookie/,
      );
      // Modules import each other by relative path only: nothing from another origin.
      for (const [, from] of js.matchAll(/from\s+"([^"]+)"/g)) expect(from, file).toMatch(/^\.\/[a-z]+\.js$/);
    }
    const html = readFileSync(`${CONSOLE_DIR}/index.html`, "utf8");
    expect(html).not.toMatch(/<script>|<style|style=|\son[a-z]+=/i);
    expect(html).not.toMatch(/(src|href)=["']?(https?:)?\/\//i);
  });
});
