import { EVENT_TYPES as CLIENT_EVENT_TYPES } from "@ledger/client";
import { loadOpenApi } from "../gateway/src/openapi-source.js";
import { EVENT_TYPES } from "../services/notification/src/endpoints.js";
import { describe, expect, it } from "vitest";

// The event types are listed where each reader needs them: the notification service (what a
// destination may subscribe to), the typed client, and the OpenAPI description (the console's
// list is checked against it in gateway/src/console.test.ts). One type missing from one of them
// would refuse or hide it there.
describe("event types", () => {
  it("are the same, in the same order, in the notification service, the typed client and OpenAPI", () => {
    const schemas = (loadOpenApi()["components"] as { schemas: Record<string, { items: { enum: string[] } }> }).schemas;
    const documented = schemas["EventTypes"]!.items.enum;
    expect([...CLIENT_EVENT_TYPES]).toEqual([...EVENT_TYPES]);
    expect([...documented].sort()).toEqual([...EVENT_TYPES].sort());
  });
});
