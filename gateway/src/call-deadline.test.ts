import * as http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { startStack, type Stack } from "@ledger/e2e";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

// A service that takes a call and never answers (stuck on a lock, a process that hangs) must not
// hold the client's request open for as long as it hangs: the gateway gives each call a deadline
// (GATEWAY_CALL_TIMEOUT_MS), sent to the service as connect-timeout-ms, and answers 503 past it.

describe("a service that never answers", () => {
  let stack: Stack;
  let silent: http2.Http2Server;
  const sessions = new Set<http2.ServerHttp2Session>();
  const deadlines: string[] = [];

  beforeAll(async () => {
    silent = http2.createServer();
    silent.on("session", (s) => sessions.add(s));
    silent.on("stream", (stream, headers) => {
      stream.on("error", () => {});
      stream.resume();
      deadlines.push(String(headers["connect-timeout-ms"]));
    });
    await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
    const holdUrl = `http://127.0.0.1:${(silent.address() as AddressInfo).port}`;
    stack = await startStack({ externalHoldUrl: holdUrl, gateway: { callTimeoutMs: 300 } });
  });
  afterAll(async () => {
    await stack?.close();
    for (const s of sessions) s.destroy();
    await new Promise((resolve) => silent?.close(resolve));
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
