import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { rateLimited } from "@ledger/common";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startStack, type Stack } from "@ledger/e2e";
import { loadOpenApi, OPENAPI_PATH } from "./openapi-source.js";
import { errorEnvelope } from "./errors.js";
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
  return (op.parameters ?? [])
    .map((p) => deref<Parameter>(p))
    .filter((p) => p.in === where)
    .map((p) => p.name);
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
    const unscoped = new Set([
      ...notificationRoutes,
      ...ledgerRoutes.filter((r) => r.path === "/programs" || (r.path === "/program" && r.method === "POST")),
    ]);
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
      expect(Object.keys(op.responses), `status ${res.status} is not documented for ${method} ${path}: ${text}`).toContain(
        String(res.status),
      );
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
    expect(await page.text()).toContain("/docs/init.js");
    expect(await (await fetch(`${base}/docs/init.js`)).text()).toContain("/v1/openapi.json");
    for (const asset of ["/docs/swagger-ui-bundle.js", "/docs/swagger-ui.css"]) expect((await fetch(`${base}${asset}`)).status).toBe(200);
  });
});

interface ObjectSchema {
  type?: string | string[];
  required?: string[];
  properties?: Record<string, ObjectSchema & { const?: string; enum?: string[] }>;
  additionalProperties?: boolean | object;
  items?: ObjectSchema;
  oneOf?: { $ref: string }[];
  discriminator?: { propertyName: string; mapping: Record<string, string> };
}

/** The schema of `error` in an error envelope for `code`, through the discriminator's mapping. */
function errorSchemaFor(code: string): ObjectSchema {
  const body = deref<ObjectSchema>(
    (spec as unknown as { components: { schemas: Record<string, ObjectSchema> } }).components.schemas["ErrorBody"]!,
  );
  const ref = body.discriminator?.mapping[code];
  expect(ref, `error code ${code} is in the discriminator's mapping`).toBeDefined();
  expect(
    body.oneOf?.map((o) => o.$ref),
    `${ref} is one of ErrorBody's oneOf`,
  ).toContain(ref);
  return deref<ObjectSchema>({ $ref: ref! });
}

/** Checks an envelope the gateway sent against its code's schema: code allowed, details typed and complete. */
function expectDocumentedError(body: {
  status: string;
  error: { code: string; message: string; details?: Record<string, unknown> };
}): void {
  expect(body.status).toBe("error");
  const schema = errorSchemaFor(body.error.code);
  const code = schema.properties!["code"]!;
  expect(code.const === body.error.code || code.enum?.includes(body.error.code), `${body.error.code} allowed by its schema`).toBe(true);
  for (const name of schema.required ?? []) expect(body.error, `${body.error.code} has ${name}`).toHaveProperty(name);
  const details = body.error.details;
  if (details === undefined) return;
  const detailsSchema = deref<ObjectSchema>(schema.properties!["details"] ?? {});
  expect(schema.properties!["details"], `${body.error.code} documents details`).toBeDefined();
  for (const name of detailsSchema.required ?? []) expect(details, `${body.error.code} details.${name}`).toHaveProperty(name);
  for (const [name, value] of Object.entries(details)) {
    const property = detailsSchema.properties?.[name];
    if (!property) {
      expect(detailsSchema.additionalProperties, `${body.error.code} details.${name} is documented`).toBeTruthy();
      continue;
    }
    const types = ([] as string[]).concat(property.type ?? []);
    const actual = Array.isArray(value) ? "array" : Number.isInteger(value) ? "integer" : typeof value;
    expect(
      types.includes(actual) || (actual === "integer" && types.includes("number")),
      `${body.error.code} details.${name} is ${types.join("|")}, got ${actual}`,
    ).toBe(true);
  }
}

describe("error details are typed per code", () => {
  it("maps every code the services and the gateway send to one schema", () => {
    const source = readFileSync(join(dirname(OPENAPI_PATH), "..", "packages/common/src/errors.ts"), "utf8");
    const union = source.slice(source.indexOf("export type ErrorCode"), source.indexOf(";", source.indexOf("export type ErrorCode")));
    const codes = [...union.matchAll(/"([a-z_]+)"/g)].map((m) => m[1]!);
    expect(codes.length).toBeGreaterThan(10);
    expect(codes).toEqual(expect.arrayContaining(["method_not_allowed", "payload_too_large"]));
    for (const code of codes) errorSchemaFor(code);
  });

  it("gives a rate-limited answer its retry_after_seconds", () => {
    const { body } = errorEnvelope(rateLimited("key", 3), "req-1") as { body: Parameters<typeof expectDocumentedError>[0] };
    expect(body.error.details).toEqual({ retry_after_seconds: 3 });
    expectDocumentedError(body);
  });

  describe("as the services send them", () => {
    let stack: Stack;
    beforeAll(async () => {
      stack = await startStack();
    });
    afterAll(async () => stack?.close());

    it("insufficient_funds, balance_out_of_range, invalid_request, not_found, unbalanced_entries and method_not_allowed", async () => {
      const { api } = stack;
      const a = (await api.post("/entity", { entity_name: "a", entity_type: "w" })).body.entity.entity_id as string;
      const b = (await api.post("/entity", { entity_name: "b", entity_type: "w" })).body.entity.entity_id as string;
      expect((await api.post("/entity/fund", { entity_id: a, amount: 100 })).status).toBe(200);
      const poor = await api.post("/entity/defund", { entity_id: a, amount: 250 });
      expect(poor.body.error).toMatchObject({ code: "insufficient_funds", details: { entity_id: a, available: 100, required: 250 } });
      // The program's deposits would pass 2^53-1: its external entity is the balance past the bound.
      const pastBound = await api.post("/entity/fund", { entity_id: b, amount: Number.MAX_SAFE_INTEGER });
      expect(pastBound.body.error).toMatchObject({
        code: "balance_out_of_range",
        details: { balance: "posted", limit: Number.MAX_SAFE_INTEGER },
      });
      const answers = [
        poor,
        pastBound,
        await api.post("/entity/fund", { entity_id: a, amount: 0 }),
        await api.post("/entity", { entity_name: "c", entity_type: "w", colour: "red" }),
        await api.get("/entities", { limit: "1000" }),
        await api.get("/entity", { entity_id: "ent_00000000000000000000000000" }),
        await api.post("/transaction", {
          description: "unbalanced",
          entries: [
            { entity_id: a, direction: "debit", amount: 10 },
            { entity_id: b, direction: "credit", amount: 9 },
          ],
        }),
        await api.request("DELETE", "/entity/fund"),
      ];
      for (const res of answers) {
        expect(res.status, JSON.stringify(res.body)).toBeGreaterThanOrEqual(400);
        expectDocumentedError(res.body);
      }
      expect(answers.map((r) => r.body.error.code)).toEqual([
        "insufficient_funds",
        "balance_out_of_range",
        "invalid_request",
        "invalid_request",
        "invalid_request",
        "not_found",
        "unbalanced_entries",
        "method_not_allowed",
      ]);
    });

    it("too_many_alerts", async () => {
      const { api } = stack;
      const id = (await api.post("/entity", { entity_name: "watched", entity_type: "w" })).body.entity.entity_id as string;
      const alert = (value: number) => api.post("/entity/alert", { entity_id: id, field: "available", operator: "lt", value });
      for (let value = 0; value < 10; value++) expect((await alert(value)).status).toBe(200);
      const refused = await alert(10);
      expect(refused.status).toBe(422);
      expect(refused.body.error).toMatchObject({ code: "too_many_alerts", details: { entity_id: id, limit: 10 } });
      expectDocumentedError(refused.body);
    });
  });
});
