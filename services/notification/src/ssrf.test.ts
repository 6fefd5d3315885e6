import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { eventually, startStack, startWebhookReceiver, type Api, type Stack, type WebhookReceiver } from "@ledger/testing";
import { isBlockedAddress, resolveTarget } from "./address-policy.js";

// SSRF protection (DESIGN.md section 6). Every destination here is an IP literal, so no DNS is
// involved, and every one is refused before a connection is made: nothing leaves the machine.

describe("address policy", () => {
  it("blocks loopback, private, link-local, metadata and other special addresses", () => {
    for (const address of ["127.0.0.1", "127.255.0.1", "10.0.0.1", "172.16.5.4", "192.168.1.1", "169.254.169.254", "100.64.0.1", "0.0.0.0", "::1", "::", "fe80::1", "fd00:ec2::254", "::ffff:10.0.0.1", "::ffff:127.0.0.1", "224.0.0.1"]) {
      expect(isBlockedAddress(address), address).toBe(true);
    }
    for (const address of ["93.184.216.34", "8.8.8.8", "2606:4700:4700::1111", "::ffff:8.8.8.8", "172.32.0.1"]) {
      expect(isBlockedAddress(address), address).toBe(false);
    }
  });

  it("refuses a literal blocked address without resolving, unless private networks are allowed", async () => {
    await expect(resolveTarget("10.0.0.1", false)).rejects.toMatchObject({ code: "blocked_address" });
    await expect(resolveTarget("[::1]", false)).rejects.toMatchObject({ code: "blocked_address" });
    await expect(resolveTarget("[::1]", true)).resolves.toEqual({ address: "::1", family: 6 });
    // localhost resolves through the system resolver (hosts file), never to a public address.
    await expect(resolveTarget("localhost", false)).rejects.toMatchObject({ code: "blocked_address" });
  });
});

describe("deliveries to blocked addresses", () => {
  let stack: Stack;
  let api: Api;
  let receiver: WebhookReceiver;

  beforeAll(async () => {
    receiver = await startWebhookReceiver();
    stack = await startStack({
      notification: { webhookExtraCa: receiver.ca, webhookAllowPrivateNetworks: false, webhookRetryScheduleMs: [100] },
    });
    api = stack.api;
  });
  afterAll(async () => {
    await stack?.close();
    await receiver?.close();
  });

  it("fails them with blocked_address and never connects", async () => {
    const port = new URL(receiver.origin).port;
    // `localhost` is a name, not an address: it is resolved at delivery time, and what it resolves
    // to is checked then, whatever it was when the destination was created.
    const byName = receiver.endpoint("/by-name").replace("127.0.0.1", "localhost");
    const urls = [receiver.endpoint("/loopback"), "https://10.0.0.1/hook", "https://169.254.169.254/latest/meta-data", `https://[::1]:${port}/hook`, byName];
    const ids: string[] = [];
    for (const url of urls) {
      const res = await api.post("/webhooks", { url });
      expect(res.status).toBe(200);
      ids.push(res.body.endpoint.endpoint_id);
    }
    const entity = await api.post("/entity", { entity_name: "w", entity_type: "wallet" });
    await api.post("/entity/fund", { entity_id: entity.body.entity.entity_id, amount: 5 });
    for (const id of ids) {
      const done = await eventually(async () => {
        const list = (await api.get("/webhooks/deliveries", { endpoint_id: id })).body.deliveries;
        return list.length === 1 && list[0].status === "failed";
      });
      expect(done).toBe(true);
      const [delivery] = (await api.get("/webhooks/deliveries", { endpoint_id: id })).body.deliveries;
      expect(delivery).toMatchObject({ status: "failed", attempts: 2, error: "blocked_address", response_status: null });
    }
    expect(receiver.received("/loopback")).toHaveLength(0);
    expect(receiver.received("/by-name")).toHaveLength(0);
  });
});
