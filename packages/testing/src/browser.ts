import { existsSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium, type BrowserContext, type Page } from "playwright-core";

// Debian's chromium, driven by playwright-core (which downloads no browser of its own), for the
// tests of the pages the gateway serves (/docs, /console).

/** The browser binary: CHROMIUM_PATH, or Debian's. scripts/ensure-chromium.sh installs it. */
export const CHROMIUM = process.env["CHROMIUM_PATH"] ?? "/usr/bin/chromium";

/** A headless Chromium with a fresh profile; `close` also removes the profile. */
export interface Chromium {
  context: BrowserContext;
  close(): Promise<void>;
}

/** Launches it. A missing browser fails, not skips: it would hide a broken page. */
export async function launchChromium(): Promise<Chromium> {
  if (!existsSync(CHROMIUM))
    throw new Error(`${CHROMIUM} not found: install it with 'apt-get install -y chromium' (scripts/ensure-chromium.sh does)`);
  const profile = mkdtempSync(join(tmpdir(), "ledger-chromium-"));
  // A fresh profile directory per run (playwright passes it as --user-data-dir).
  const context = await chromium.launchPersistentContext(profile, {
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
  return {
    context,
    async close() {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

/** Where the console's tests put their screenshots: CONSOLE_SCREENSHOTS_DIR, or test-output/console/ (gitignored). */
export const CONSOLE_SCREENSHOTS =
  process.env["CONSOLE_SCREENSHOTS_DIR"] ?? fileURLToPath(new URL("../../../test-output/console/", import.meta.url));

/** A page of the gateway's, with what its test must not see and the screenshots taken of it. */
export interface WatchedPage {
  page: Page;
  /** Every request that left the gateway's origin. */
  outside: string[];
  /** Script errors and console errors: a CSP or Trusted Types violation shows here. */
  problems: string[];
  /** The paths of the screenshots taken, in order. */
  shots: string[];
  /** A full-page screenshot, numbered in order: CONSOLE_SCREENSHOTS/<prefix><nn>-<name>.png. */
  shot(name: string): Promise<void>;
}

/**
 * A 1280x900 page in `chromium` for the pages the gateway at `origin` serves. A blob: URL of that
 * origin (a download the page makes) is its own; a "Failed to load resource" for a 4xx is the page
 * being told no by the API, which it shows, so it is no problem either.
 */
export async function watchedPage(chromium: Chromium, origin: string, shotPrefix = ""): Promise<WatchedPage> {
  mkdirSync(CONSOLE_SCREENSHOTS, { recursive: true });
  const page = await chromium.context.newPage();
  await page.setViewportSize({ width: 1280, height: 900 });
  const watched: WatchedPage = {
    page,
    outside: [],
    problems: [],
    shots: [],
    async shot(name) {
      const path = join(CONSOLE_SCREENSHOTS, `${shotPrefix}${String(watched.shots.length + 1).padStart(2, "0")}-${name}.png`);
      await page.screenshot({ path, fullPage: true });
      watched.shots.push(path);
    },
  };
  page.on("request", (req) => {
    if (!req.url().startsWith(`${origin}/`) && !req.url().startsWith(`blob:${origin}/`)) watched.outside.push(req.url());
  });
  page.on("console", (msg) => {
    if (msg.type() === "error" && !/Failed to load resource: the server responded with a status of 4\d\d/.test(msg.text()))
      watched.problems.push(msg.text());
  });
  page.on("pageerror", (err) => watched.problems.push(String(err)));
  return watched;
}
