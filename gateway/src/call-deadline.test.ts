import { startStack, type Stack } from "@ledger/e2e";
import { startHttp2Server, type Http2TestServer } from "@ledger/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

// A service that takes a call and never answers (stuck on a lock, a process that hangs) must not
// hold the client's request open for as long as it hangs: the gateway gives each call a deadline
// (GATEWAY_CALL_TIMEOUT_MS), sent to the service as connect-timeout-ms, and answers 503 past it.

describe("a service that never answers", () => {
  let stack: Stack;
  let silent: Http2TestServer;
  const deadlines: string[] = [];

  beforeAll(async () => {
    silent = await startHttp2Server((stream, headers) => {
      stream.resume();
      deadlines.push(String(headers["connect-timeout-ms"]));
    });
    stack = await startStack({ externalHoldUrl: silent.url, gateway: { callTimeoutMs: 300 } });
  });
  afterAll(async () => {
    await stack?.close();
    await silent?.close();
  });

  it("answers 503 in the envelope once the call's deadline has passed, and told the service that deadline", async () => {
    const res = await stack.api.get("/holds", { entity_id: "ent_00000000000000000000000000" });
    expect(res.status).toBe(503);
    expect(res.body).toMatchObject({ status: "error", error: { code: "unavailable" } });
    expect(deadlines).toHaveLength(1);
    expect(Number(deadlines[0])).toBe(300);
    // The other services answer as before.
    expect((await stack.api.get("/programs")).status).toBe(200);
  });
});
