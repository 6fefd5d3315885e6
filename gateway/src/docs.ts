import { readFileSync, statSync } from "node:fs";
import type { IncomingMessage, ServerResponse } from "node:http";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { requestUrl } from "@ledger/common";

// The OpenAPI description and a page that renders it, served by the gateway itself. Neither
// needs an API key: the description is public, and a browser opening /docs sends none.
// The renderer is swagger-ui-dist's prebuilt bundle, served from node_modules, because the page
// must work where no CDN is reachable.

// The build (scripts/build.mjs) parses openapi.yaml once and defines this as the document's JSON
// text: parsing the YAML took about 0.4 s of the one process's start. Run from source (tsx, tests)
// it is not defined and the YAML is parsed here, by a module loaded only then: compiled, the YAML
// parser is a chunk the gateway never reads.
declare const __LEDGER_OPENAPI_JSON__: string | undefined;

/** The OpenAPI document as JSON text, as /v1/openapi.json serves it. */
export async function openApiJson(): Promise<string> {
  if (typeof __LEDGER_OPENAPI_JSON__ === "string") return __LEDGER_OPENAPI_JSON__;
  const { loadOpenApi } = await import("./openapi-source.js");
  return JSON.stringify(loadOpenApi());
}

const SWAGGER_DIR = dirname(createRequire(import.meta.url).resolve("swagger-ui-dist/package.json"));

const PAGE = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Ledger REST API</title>
<link rel="stylesheet" href="/docs/swagger-ui.css">
</head>
<body>
<div id="swagger-ui"></div>
<script src="/docs/swagger-ui-bundle.js"></script>
<script src="/docs/init.js"></script>
</body>
</html>
`;

// In a file of its own, not inline, so the policy below allows scripts from the gateway only.
// validatorUrl null: Swagger UI would otherwise send the document to an outside validator.
const INIT = `window.ui = SwaggerUIBundle({ url: "/v1/openapi.json", dom_id: "#swagger-ui", validatorUrl: null, deepLinking: true });
`;

/**
 * Sent with the page and its files. Scripts and styles come from the gateway only (no inline code,
 * no eval, no CDN), the page may call only its own origin (the document, and "Try it out" on /v1),
 * and nothing may frame it. Swagger UI's stylesheet draws its icons as data: images.
 * docs-browser.test.ts renders the page and tries an endpoint under it, with no refusal.
 */
export const DOCS_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "form-action 'none'",
  "base-uri 'none'",
  "frame-ancestors 'none'",
].join("; ");

const HEADERS = {
  "content-security-policy": DOCS_CSP,
  "x-content-type-options": "nosniff",
  "x-frame-options": "DENY",
  "referrer-policy": "no-referrer",
};

const ASSETS: Record<string, { file: string; type: string }> = {
  "/docs/swagger-ui.css": { file: "swagger-ui.css", type: "text/css; charset=utf-8" },
  "/docs/swagger-ui-bundle.js": { file: "swagger-ui-bundle.js", type: "text/javascript; charset=utf-8" },
};

/**
 * A handler for GET /v1/openapi.json, /docs and the renderer's files. It returns false for any
 * other request so the REST handler takes it. The document is read here, at start, so a missing
 * or broken openapi.yaml stops the gateway (or, compiled, the build) instead of failing a client
 * later. The renderer's files (1.9 MB) are checked here but read at their first request: most
 * gateways never serve them, and each would otherwise hold them in memory.
 */
export async function createDocsHandler(): Promise<(req: IncomingMessage, res: ServerResponse) => boolean> {
  const spec = Buffer.from(await openApiJson());
  const page = Buffer.from(PAGE);
  const init = Buffer.from(INIT);
  const assets = new Map(
    Object.entries(ASSETS).map(([path, a]) => {
      const file = join(SWAGGER_DIR, a.file);
      if (!statSync(file).isFile()) throw new Error(`${file} is not a file`);
      let body: Buffer | undefined;
      return [path, { body: () => (body ??= readFileSync(file)), type: a.type }];
    }),
  );
  const send = (res: ServerResponse, type: string, body: Buffer, cache: string) => {
    res.writeHead(200, Object.assign({}, HEADERS, { "content-type": type, "content-length": body.length, "cache-control": cache }));
    res.end(body);
  };
  return (req, res) => {
    if (req.method !== "GET" && req.method !== "HEAD") return false;
    const path = requestUrl(req)?.pathname ?? "";
    if (path === "/v1/openapi.json") {
      send(res, "application/json; charset=utf-8", spec, "no-cache");
      return true;
    }
    if (path === "/docs" || path === "/docs/") {
      send(res, "text/html; charset=utf-8", page, "no-cache");
      return true;
    }
    if (path === "/docs/init.js") {
      // no-cache, like the page: a new gateway version's page and script arrive together.
      send(res, "text/javascript; charset=utf-8", init, "no-cache");
      return true;
    }
    const asset = assets.get(path);
    if (asset) {
      send(res, asset.type, asset.body(), "public, max-age=3600");
      return true;
    }
    return false;
  };
}
