import { describe, expect, it } from "vitest";
import { readGatewayConfig } from "./config.js";

// The body budget (GATEWAY_BODY_BUDGET_BYTES, docs/configuration.md): a default that leaves room
// for the largest body, and no value a body of the allowed size could never fit in.
describe("GATEWAY_BODY_BUDGET_BYTES", () => {
  it("is 32 MiB unless set, or the largest body limit when that is more", () => {
    expect(readGatewayConfig({}).bodyBudgetBytes).toBe(32 * 1024 * 1024);
    expect(readGatewayConfig({ GATEWAY_BATCH_BODY_LIMIT_BYTES: String(48 * 1024 * 1024) }).bodyBudgetBytes).toBe(48 * 1024 * 1024);
    expect(readGatewayConfig({ GATEWAY_BODY_BUDGET_BYTES: "8388608" }).bodyBudgetBytes).toBe(8 * 1024 * 1024);
  });

  it("stops the start when it is below the largest body a request may have", () => {
    expect(() => readGatewayConfig({ GATEWAY_BODY_BUDGET_BYTES: "1048576" })).toThrow(/GATEWAY_BODY_BUDGET_BYTES must be between 4194304/);
    expect(() => readGatewayConfig({ GATEWAY_BODY_BUDGET_BYTES: "lots" })).toThrow(/GATEWAY_BODY_BUDGET_BYTES must be an integer/);
  });
});
