import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium, type BrowserContext } from "playwright-core";

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
