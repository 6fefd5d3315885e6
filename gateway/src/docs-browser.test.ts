import type { BrowserContext } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startHandlers, type Handlers } from "@ledger/e2e";
import { launchChromium, type Chromium } from "@ledger/testing/browser";

// /docs in a real browser. The page must render the description with its local renderer files only.
// The gateway runs in front of the services' handlers in memory: the page needs no database.

let handlers: Handlers;
let chromium: Chromium;
let browser: BrowserContext;

beforeAll(async () => {
  handlers = await startHandlers();
  chromium = await launchChromium();
  browser = chromium.context;
});

afterAll(async () => {
  await chromium?.close();
  await handlers?.close();
});

describe("/docs in headless Chromium", () => {
  it("renders every tag's endpoints from /v1/openapi.json", async () => {
    const base = handlers.restUrl.replace(/\/v1$/, "");
    const page = await browser.newPage();
    const outside: string[] = [];
    // Under its Content-Security-Policy: nothing the page does may be refused.
    const refused: string[] = [];
    page.on("console", (message) => {
      if (/content security policy|refused to/i.test(message.text())) refused.push(message.text());
    });
    page.on("pageerror", (err) => refused.push(err.message));
    // Every request the page makes must stay on the gateway.
    page.on("request", (req) => {
      if (!req.url().startsWith(base) && !req.url().startsWith("data:")) outside.push(req.url());
    });
    await page.goto(`${base}/docs`);
    await page.getByText("/entity/fund", { exact: true }).first().waitFor({ state: "visible", timeout: 30_000 });
    for (const path of ["/entity/fund", "/transaction/reverse", "/hold/capture", "/webhooks/roll", "/events"]) {
      expect(await page.getByText(path, { exact: true }).first().isVisible(), path).toBe(true);
    }
    expect(await page.getByText("Ledger REST API").first().isVisible()).toBe(true);
    expect(outside).toEqual([]);
    // "Try it out" works under the policy: a call to /v1 from the page (answered 401, with no key).
    await page.getByText("/programs", { exact: true }).first().click();
    await page.getByRole("button", { name: "Try it out" }).first().click();
    await page.getByRole("button", { name: "Execute" }).first().click();
    await page.locator(".live-responses-table .response-col_status").filter({ hasText: "401" }).first().waitFor({ timeout: 30_000 });
    expect(refused).toEqual([]);
    await page.close();
  }, 60_000);

  it("is served with a Content-Security-Policy and X-Frame-Options DENY, as are its files", async () => {
    const base = handlers.restUrl.replace(/\/v1$/, "");
    for (const path of ["/docs", "/docs/init.js", "/docs/swagger-ui-bundle.js", "/docs/swagger-ui.css"]) {
      const res = await fetch(base + path);
      expect(res.status, path).toBe(200);
      const csp = res.headers.get("content-security-policy") ?? "";
      expect(csp, path).toContain("default-src 'none'");
      expect(csp, path).toContain("script-src 'self'");
      expect(csp, path).not.toMatch(/script-src[^;]*'unsafe-(inline|eval)'/);
      expect(csp, path).toContain("frame-ancestors 'none'");
      expect(res.headers.get("x-frame-options"), path).toBe("DENY");
      expect(res.headers.get("x-content-type-options"), path).toBe("nosniff");
    }
    // The page has no inline script for the policy to refuse.
    expect(await (await fetch(`${base}/docs`)).text()).not.toContain("<script>");
  });
});
