import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium, type BrowserContext } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startStack, type Stack } from "@ledger/testing";

// /docs in a real browser: Debian's chromium, driven by playwright-core (which downloads no
// browser of its own). The page must render the description with its local renderer files only.

const CHROMIUM = process.env["CHROMIUM_PATH"] ?? "/usr/bin/chromium";

let stack: Stack;
let browser: BrowserContext;
let profile: string;

beforeAll(async () => {
  // Not a skip: a missing browser would hide a broken docs page, so it fails and says what to do.
  if (!existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} not found: install it with 'apt-get install -y chromium' (.ci/run does)`);
  stack = await startStack({ notification: {} });
  profile = mkdtempSync(join(tmpdir(), "docs-chromium-"));
  // A fresh profile directory per run (playwright passes it as --user-data-dir).
  browser = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    // --no-sandbox because tests run as root; the rest keep Chromium from calling out of the machine.
    args: [
      "--no-sandbox",
      "--headless",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
});

afterAll(async () => {
  await browser?.close();
  await stack?.close();
  if (profile) rmSync(profile, { recursive: true, force: true });
});

describe("/docs in headless Chromium", () => {
  it("renders every tag's endpoints from /v1/openapi.json", async () => {
    const base = stack.restUrl.replace(/\/v1$/, "");
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
