import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readGatewayConfig } from "@ledger/gateway";
import { startHandlers, type Handlers } from "@ledger/e2e";

// Browsers on the allowed origins may call the API; every other origin, and every origin when
// GATEWAY_CORS_ORIGINS is unset, gets no CORS header at all, so the browser keeps the answer from its page.

const ALLOWED = "https://app.example.com";

// Gateways in front of the services' handlers in memory: CORS is the gateway's alone, and every
// answer looked at here (the OpenAPI document, refusals) needs no database.
let allowing: Handlers;
let plain: Handlers;
beforeAll(async () => {
  allowing = await startHandlers({ corsOrigins: [ALLOWED, "http://localhost:5173"] });
  // With the defaults: CORS off.
  plain = await startHandlers({ corsOrigins: readGatewayConfig({}).corsOrigins });
});
afterAll(async () => {
  await plain?.close();
  await allowing?.close();
});

const preflight = (base: string, origin: string, path = "/v1/entity/fund") =>
  fetch(`${base}${path}`, {
    method: "OPTIONS",
    headers: {
      origin,
      "access-control-request-method": "POST",
      "access-control-request-headers": "authorization, content-type, idempotency-key",
    },
  });

function corsHeaders(res: Response): string[] {
  return [...res.headers.keys()].filter((name) => name.startsWith("access-control-"));
}

describe("with GATEWAY_CORS_ORIGINS set", () => {
  it("answers a preflight from an allowed origin with the path's methods and the API's headers", async () => {
    const res = await preflight(allowing.gateway.server.url, ALLOWED);
    expect(res.status).toBe(204);
    expect(res.headers.get("access-control-allow-origin")).toBe(ALLOWED);
    expect(res.headers.get("access-control-allow-methods")).toBe("POST");
    const allowed = res.headers.get("access-control-allow-headers")!.toLowerCase().split(/,\s*/);
    for (const h of ["authorization", "content-type", "idempotency-key", "program_id", "x-request-id"]) expect(allowed).toContain(h);
    expect(res.headers.get("access-control-max-age")).toMatch(/^\d+$/);
    expect(res.headers.get("vary")).toMatch(/origin/i);
    expect(res.headers.get("access-control-allow-credentials")).toBeNull();
    // A path with several methods lists them all.
    const webhooks = await preflight(allowing.gateway.server.url, ALLOWED, "/v1/webhooks");
    expect(webhooks.headers.get("access-control-allow-methods")!.split(", ").sort()).toEqual(["DELETE", "GET", "POST", "PUT"]);
  });

  it("lets an allowed origin read the answer and the headers it needs, errors included", async () => {
    const res = await fetch(`${allowing.restUrl}/openapi.json`, { headers: { origin: ALLOWED } });
    expect(res.status).toBe(200);
    expect(res.headers.get("access-control-allow-origin")).toBe(ALLOWED);
    expect(res.headers.get("access-control-expose-headers")!.toLowerCase().split(/,\s*/).sort()).toEqual([
      "idempotent-replayed",
      "retry-after",
      "x-request-id",
    ]);
    expect(res.headers.get("vary")).toMatch(/origin/i);
    const unauthenticated = await fetch(`${allowing.restUrl}/entity?entity_id=ent_01m80ts8wm38j0zc0r0sgz6t61`, {
      headers: { origin: ALLOWED },
    });
    expect(unauthenticated.status).toBe(401);
    expect(unauthenticated.headers.get("access-control-allow-origin")).toBe(ALLOWED);
    const invalid = await fetch(`${allowing.restUrl}/entity`, { headers: { origin: ALLOWED, authorization: allowing.apiKey } });
    expect(invalid.status).toBe(400);
    expect(invalid.headers.get("access-control-allow-origin")).toBe(ALLOWED);
  });

  it("gives an origin not on the list no CORS header, on a preflight or a request", async () => {
    for (const origin of ["https://evil.example", "https://app.example.com.evil.example", "http://app.example.com", "null"]) {
      const pre = await preflight(allowing.gateway.server.url, origin);
      expect(pre.status, origin).toBe(405);
      expect(corsHeaders(pre), origin).toEqual([]);
      const res = await fetch(`${allowing.restUrl}/openapi.json`, { headers: { origin } });
      expect(res.status).toBe(200);
      expect(corsHeaders(res), origin).toEqual([]);
    }
  });

  it("adds nothing outside /v1", async () => {
    const res = await fetch(`${allowing.gateway.server.url}/healthz`, { headers: { origin: ALLOWED } });
    expect(corsHeaders(res)).toEqual([]);
  });
});

describe("by default", () => {
  it("reads no origins, answers a preflight 405 and adds no CORS header", async () => {
    expect(readGatewayConfig({}).corsOrigins).toEqual([]);
    const pre = await preflight(plain.gateway.server.url, ALLOWED);
    expect(pre.status).toBe(405);
    expect(corsHeaders(pre)).toEqual([]);
    const res = await fetch(`${plain.restUrl}/openapi.json`, { headers: { origin: ALLOWED } });
    expect(res.status).toBe(200);
    expect(corsHeaders(res)).toEqual([]);
  });

  it("refuses an origin list it cannot use exactly, naming the variable", () => {
    expect(readGatewayConfig({ GATEWAY_CORS_ORIGINS: "https://a.example, http://localhost:3000" }).corsOrigins).toEqual([
      "https://a.example",
      "http://localhost:3000",
    ]);
    for (const bad of ["*", "https://a.example/", "https://a.example/app", "a.example", "ftp://a.example"]) {
      expect(() => readGatewayConfig({ GATEWAY_CORS_ORIGINS: bad }), bad).toThrow(/GATEWAY_CORS_ORIGINS/);
    }
  });
});
