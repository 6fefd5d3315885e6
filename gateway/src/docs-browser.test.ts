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
    await page.close();
  }, 60_000);
});
