import { readFileSync } from "node:fs";
import type { IncomingMessage, ServerResponse } from "node:http";
import { fileURLToPath } from "node:url";
import { requestUrl } from "@ledger/common";

// The console (ledger and webhooks): one page of plain HTML, CSS and JavaScript modules in
// gateway/console/, served as they are (nothing to build). Like /docs it needs no API key and is not rate limited: the page
// holds no data; it asks the user for a key and calls the public /v1 API with it from the browser.

/** Where the console's files live, beside this package's src/. */
export const CONSOLE_DIR = fileURLToPath(new URL("../console", import.meta.url));

/**
 * Sent with the page and each asset. Scripts and styles come from the gateway only (no inline
 * code, no CDN), the page may call only its own origin, and Trusted Types make the browser refuse
 * any HTML string put into the DOM: the console builds everything with DOM calls and text.
 */
export const CONSOLE_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self'",
  "connect-src 'self'",
  "form-action 'none'",
  "base-uri 'none'",
  "frame-ancestors 'none'",
  "require-trusted-types-for 'script'",
  "trusted-types 'none'",
].join("; ");

const HEADERS = {
  "content-security-policy": CONSOLE_CSP,
  "x-content-type-options": "nosniff",
  "x-frame-options": "DENY",
  "referrer-policy": "no-referrer",
  "cross-origin-opener-policy": "same-origin",
  "cross-origin-resource-policy": "same-origin",
  // no-cache: a browser revalidates, so a new gateway version's page and script arrive together.
  "cache-control": "no-cache",
};

const FILES: Record<string, { file: string; type: string }> = {
  "/console": { file: "index.html", type: "text/html; charset=utf-8" },
  "/console/": { file: "index.html", type: "text/html; charset=utf-8" },
  "/console/console.css": { file: "console.css", type: "text/css; charset=utf-8" },
  "/console/console.js": { file: "console.js", type: "text/javascript; charset=utf-8" },
  "/console/core.js": { file: "core.js", type: "text/javascript; charset=utf-8" },
  "/console/ledger.js": { file: "ledger.js", type: "text/javascript; charset=utf-8" },
  "/console/money.js": { file: "money.js", type: "text/javascript; charset=utf-8" },
  "/console/chart.js": { file: "chart.js", type: "text/javascript; charset=utf-8" },
};

/**
 * A handler for GET and HEAD of the console's files; false for any other request, which the
 * REST handler then answers (404 for an unknown /console/... path). The files are read once, at
 * start, so a missing one stops the gateway rather than failing a user later.
 */
export function createConsoleHandler(): (req: IncomingMessage, res: ServerResponse) => boolean {
  const files = new Map(Object.entries(FILES).map(([path, f]) => [path, { body: readFileSync(`${CONSOLE_DIR}/${f.file}`), type: f.type }]));
  return (req, res) => {
    if (req.method !== "GET" && req.method !== "HEAD") return false;
    const file = files.get(requestUrl(req)?.pathname ?? "");
    if (!file) return false;
    res.writeHead(200, Object.assign({}, HEADERS, { "content-type": file.type, "content-length": file.body.length }));
    res.end(req.method === "HEAD" ? undefined : file.body);
    return true;
  };
}
