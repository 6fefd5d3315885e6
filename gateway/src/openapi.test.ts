import { spawnSync } from "node:child_process";
import { dirname, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startStack, type Stack } from "@ledger/testing";
import { loadOpenApi, OPENAPI_PATH } from "./docs.js";
import { holdRoutes } from "./hold-routes.js";
import { notificationRoutes } from "./notification-routes.js";
import { ledgerRoutes } from "./routes.js";

// gateway/openapi.yaml and the gateway must agree: the description lints clean, every documented
// operation exists in the running gateway, and every gateway route is documented with the same
// query parameters and body fields. A route added without its documentation fails here.

interface Parameter {
  name: string;
  in: string;
}
interface Operation {
  parameters?: (Parameter | { $ref: string })[];
  requestBody?: { content?: Record<string, { schema?: Schema }> } | { $ref: string };
  responses: Record<string, unknown>;
  security?: unknown[];
}
interface Schema {
  properties?: Record<string, unknown>;
  $ref?: string;
}

const spec = loadOpenApi() as {
  paths: Record<string, Record<string, Operation>>;
  components: { parameters: Record<string, Parameter>; requestBodies: Record<string, Operation["requestBody"]> };
};
const METHODS = ["get", "post", "put", "delete", "patch"];
const routes = [...ledgerRoutes, ...holdRoutes, ...notificationRoutes];

function deref<T>(value: T | { $ref: string }): T {
  if (value && typeof value === "object" && "$ref" in value) {
    let node: unknown = spec;
    for (const part of value.$ref.replace(/^#\//, "").split("/")) node = (node as Record<string, unknown>)[part];
    return node as T;
  }
  return value as T;
}

function documented(): { method: string; path: string; op: Operation }[] {
  return Object.entries(spec.paths).flatMap(([path, item]) =>
    Object.entries(item)
      .filter(([method]) => METHODS.includes(method))
      .map(([method, op]) => ({ method: method.toUpperCase(), path, op })),
  );
}

function paramsOf(op: Operation, where: string): string[] {
  return (op.parameters ?? []).map((p) => deref<Parameter>(p)).filter((p) => p.in === where).map((p) => p.name);
}

function bodyFieldsOf(op: Operation): string[] {
  if (!op.requestBody) return [];
  const schema = deref(op.requestBody)?.content?.["application/json"]?.schema;
  return Object.keys(deref<Schema>(schema ?? {}).properties ?? {});
}

describe("redocly lint", () => {
  it("passes on gateway/openapi.yaml with gateway/redocly.yaml (recommended-strict)", () => {
    const gatewayDir = dirname(OPENAPI_PATH);
    const bin = join(gatewayDir, "..", "node_modules", ".bin", "redocly");
    // Telemetry and the update check would call out of the machine; both are turned off.
    const run = spawnSync(bin, ["lint", "openapi.yaml", "--format=stylish"], {
      cwd: gatewayDir,
      encoding: "utf8",
      env: { ...process.env, REDOCLY_TELEMETRY: "off", REDOCLY_SUPPRESS_UPDATE_NOTICE: "true", NO_COLOR: "1" },
      timeout: 120_000,
    });
    expect(run.error, String(run.error)).toBeUndefined();
    expect(run.status, `${run.stdout}\n${run.stderr}`).toBe(0);
  }, 150_000);
});

describe("every gateway route is documented", () => {
  for (const route of routes) {
    it(`${route.method} ${route.path}`, () => {
      const op = spec.paths[route.path]?.[route.method.toLowerCase()];
      expect(op, `${route.method} ${route.path} is missing from gateway/openapi.yaml`).toBeDefined();
      expect(paramsOf(op!, "query").sort()).toEqual([...(route.query ?? [])].sort());
      expect(bodyFieldsOf(op!).sort()).toEqual([...(route.body ?? [])].sort());
      // The headers the gateway reads: Idempotency-Key on writes, program_id on program-scoped paths.
      const headers = paramsOf(op!, "header");
      expect(headers).toContain("X-Request-Id");
      if (route.method === "POST" || route.method === "PUT") expect(headers).toContain("Idempotency-Key");
      if (route.method === "POST" || route.method === "PUT") expect(Object.keys(op!.responses)).toContain("413");
      for (const status of ["400", "401", "429", "500", "503"]) expect(Object.keys(op!.responses)).toContain(status);
    });
  }

  it("program-scoped routes, and only they, document the program_id header", () => {
    // Notification paths are account-scoped, and creating or listing programs names no program.
    const unscoped = new Set([...notificationRoutes, ...ledgerRoutes.filter((r) => r.path === "/programs" || (r.path === "/program" && r.method === "POST"))]);
    for (const route of routes) {
      const op = spec.paths[route.path]![route.method.toLowerCase()]!;
      expect(paramsOf(op, "header").includes("program_id"), `${route.method} ${route.path}`).toBe(!unscoped.has(route));
    }
  });
});

describe("every documented operation answers", () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack({ notification: {} });
  });
  afterAll(async () => stack?.close());

  for (const { method, path, op } of documented()) {
    it(`${method} ${path}`, async () => {
      const url = `${stack.restUrl}${path}`;
      const headers: Record<string, string> = { "content-type": "application/json" };
      // Authenticated, so the answer comes from the route and not from a missing key.
      if (op.security?.length !== 0) headers["authorization"] = stack.account.api_key;
      const res = await fetch(url, { method, headers, ...(method === "POST" || method === "PUT" ? { body: "{}" } : {}) });
      const text = await res.text();
      // A 404 for a missing object is an answer; the gateway's "no endpoint" 404 and a 405 are not.
      expect(res.status, text).not.toBe(405);
      if (res.status === 404) expect(text).not.toContain("no endpoint");
      expect(Object.keys(op.responses), `status ${res.status} is not documented for ${method} ${path}: ${text}`).toContain(String(res.status));
    });
  }

  it("serves the description as JSON and the docs page without an API key", async () => {
    const base = stack.restUrl.replace(/\/v1$/, "");
    const json = await fetch(`${base}/v1/openapi.json`);
    expect(json.status).toBe(200);
    expect(json.headers.get("content-type")).toContain("application/json");
    expect(await json.json()).toEqual(loadOpenApi());
    const page = await fetch(`${base}/docs`);
    expect(page.status).toBe(200);
    expect(await page.text()).toContain("/v1/openapi.json");
    for (const asset of ["/docs/swagger-ui-bundle.js", "/docs/swagger-ui.css"]) expect((await fetch(`${base}${asset}`)).status).toBe(200);
  });
});
