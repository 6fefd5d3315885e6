import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startWebhookReceiver, type WebhookReceiver } from "@ledger/testing";
import { startStack, type Api, type Stack } from "@ledger/e2e";
import { isBlockedAddress, resolveTarget } from "./address-policy.js";

// SSRF protection (docs/webhooks.md#ssrf-rules). Every destination here is an IP literal or `localhost`,
// and every one is refused before a connection is made: nothing leaves the machine.

// Every spelling of a non-public address that should never pass, by what it hides.
const BLOCKED = {
  loopback: ["127.0.0.1", "127.255.0.1", "::1"],
  private: ["10.0.0.1", "172.16.5.4", "192.168.1.1"],
  "link-local and metadata": ["169.254.169.254", "169.254.0.1", "fe80::1", "fd00:ec2::254"],
  "carrier-grade NAT": ["100.64.0.1", "100.127.255.254"],
  unspecified: ["0.0.0.0", "::", "0.1.2.3"],
  multicast: ["224.0.0.1", "239.255.255.250", "ff02::1", "ff0e::1"],
  "unique local": ["fc00::1", "fdff:ffff::1"],
  "IPv4-mapped": ["::ffff:127.0.0.1", "::ffff:7f00:1", "::ffff:10.0.0.1", "::ffff:169.254.169.254", "0:0:0:0:0:ffff:a00:1"],
  "IPv4-compatible": ["::127.0.0.1", "::7f00:1", "::10.0.0.1", "::8.8.8.8", "::808:808"],
  "IPv4-translated": ["::ffff:0:7f00:1", "::ffff:0:808:808"],
  "6to4": ["2002:7f00:1::", "2002:a00:1::", "2002:a9fe:a9fe::1", "2002:808:808::1"],
  NAT64: ["64:ff9b::127.0.0.1", "64:ff9b::7f00:1", "64:ff9b:1::a00:1", "64:ff9b::8.8.8.8"],
  Teredo: ["2001::1", "2001:0:4136:e378:8000:63bf:3fff:fdd2"],
  "decimal, octal and hex IPv4": ["2130706433", "0x7f.1", "017700000001", "0x7f000001", "127.1", "0xa9.0xfe.0xa9.0xfe"],
  "reserved and documentation": ["240.0.0.1", "255.255.255.255", "192.0.2.1", "198.18.0.1", "2001:db8::1", "fec0::1", "100::1"],
  "not an address": ["", "localhost", "example.com", "1.2.3.4.5", "fe80::1%eth0"],
};
const PUBLIC = [
  "93.184.216.34",
  "8.8.8.8",
  "172.32.0.1",
  "100.128.0.1",
  "::ffff:8.8.8.8",
  "::ffff:808:808",
  "2606:4700:4700::1111",
  "2a00:1450:4001:800::200e",
];

describe("address policy", () => {
  for (const [kind, addresses] of Object.entries(BLOCKED)) {
    it(`blocks ${kind}`, () => {
      for (const address of addresses) expect(isBlockedAddress(address), address).toBe(true);
    });
  }

  it("lets public unicast addresses through, IPv4-mapped ones included", () => {
    for (const address of PUBLIC) expect(isBlockedAddress(address), address).toBe(false);
  });

  it("refuses a literal blocked address without resolving, unless private networks are allowed", async () => {
    await expect(resolveTarget("10.0.0.1", false)).rejects.toMatchObject({ code: "blocked_address" });
    await expect(resolveTarget("[::1]", false)).rejects.toMatchObject({ code: "blocked_address" });
    await expect(resolveTarget("[::7f00:1]", false)).rejects.toMatchObject({ code: "blocked_address" });
    await expect(resolveTarget("[2002:7f00:1::]", false)).rejects.toMatchObject({ code: "blocked_address" });
    await expect(resolveTarget("2130706433", false)).rejects.toMatchObject({ code: "blocked_address" });
    await expect(resolveTarget("[::1]", true)).resolves.toEqual({ address: "::1", family: 6 });
    await expect(resolveTarget("[2606:4700:4700::1111]", false)).resolves.toEqual({ address: "2606:4700:4700::1111", family: 6 });
    // localhost resolves through the system resolver (hosts file), never to a public address.
    await expect(resolveTarget("localhost", false)).rejects.toMatchObject({ code: "blocked_address" });
  });
});

describe("destinations and deliveries to blocked addresses", () => {
  let stack: Stack;
  let api: Api;
  let receiver: WebhookReceiver;

  beforeAll(async () => {
    receiver = await startWebhookReceiver();
    stack = await startStack({
      notification: { webhookExtraCa: receiver.ca, webhookAllowPrivateNetworks: false, webhookRetryScheduleMs: [100, 100, 100] },
    });
    api = stack.api;
  });
  afterAll(async () => {
    await stack?.close();
    await receiver?.close();
  });

  it("refuses a destination whose host is a blocked address, however it is spelled, and stores nothing", async () => {
    const port = new URL(receiver.origin).port;
    const hosts = [
      ...Object.values(BLOCKED)
        .flat()
        .filter((a) => a !== "" && !/[a-z]{2}/i.test(a) && !a.includes("%") && a !== "1.2.3.4.5"),
      // What a client might type: the URL parser turns each into an address first.
      "[::127.0.0.1]",
      "[::ffff:127.0.0.1]",
      "[64:ff9b::127.0.0.1]",
    ];
    for (const host of hosts) {
      const literal = host.includes(":") && !host.startsWith("[") ? `[${host}]` : host;
      const res = await api.post("/webhooks", { url: `https://${literal}:${port}/hook` });
      expect(res.status, literal).toBe(400);
      expect(res.body.error).toMatchObject({ code: "invalid_request", details: { field: "url" } });
    }
    // A name is accepted: it is resolved at delivery time. This account never has an event, so
    // nothing is ever sent to it.
    const endpoint = (await api.post("/webhooks", { url: "https://hooks.example/ok" })).body.endpoint;
    expect((await api.put("/webhooks", { endpoint_id: endpoint.endpoint_id, url: `https://[::7f00:1]:${port}/hook` })).status).toBe(400);
    expect((await api.get("/webhooks", { limit: "100" })).body.endpoints).toHaveLength(1);
    expect((await api.get("/webhook", { id: endpoint.endpoint_id })).body.endpoint.url).toBe("https://hooks.example/ok");
  });

  it("fails them at the first attempt with blocked_address, never connects and never retries", async () => {
    const { api: other } = await stack.newAccount("blocked deliveries");
    const port = new URL(receiver.origin).port;
    // `localhost` is a name, not an address: it is resolved at delivery time, and what it resolves
    // to is checked then, whatever it was when the destination was created.
    const byName = receiver.endpoint("/by-name").replace("127.0.0.1", "localhost");
    const res = await other.post("/webhooks", { url: byName });
    expect(res.status).toBe(200);
    const ids = [res.body.endpoint.endpoint_id as string];
    // Literal addresses stored before creation refused them (or while private networks were
    // allowed) are checked again at delivery time.
    for (const url of [
      receiver.endpoint("/loopback"),
      `https://[::7f00:1]:${port}/compat`,
      `https://[2002:7f00:1::]:${port}/6to4`,
      `https://[64:ff9b::7f00:1]:${port}/nat64`,
    ]) {
      const created = await other.post("/webhooks", { url: "https://hooks.example/placeholder" });
      const id = created.body.endpoint.endpoint_id as string;
      await stack.notificationSql!`update notification.endpoints set url = ${url} where id = ${id}`;
      ids.push(id);
    }
    const entity = await other.post("/entity", { entity_name: "w", entity_type: "wallet" });
    await other.post("/entity/fund", { entity_id: entity.body.entity.entity_id, amount: 5 });
    for (const id of ids) {
      await expect
        .poll(
          async () =>
            ((await other.get("/webhooks/deliveries", { endpoint_id: id })).body.deliveries as { status: string }[]).map((d) => d.status),
          { message: id },
        )
        .toEqual(["failed"]);
    }
    // Longer than the whole retry schedule: had a retry been scheduled, it would show by now.
    await new Promise((r) => setTimeout(r, 600));
    for (const id of ids) {
      const [delivery] = (await other.get("/webhooks/deliveries", { endpoint_id: id })).body.deliveries;
      expect(delivery).toMatchObject({
        status: "failed",
        attempts: 1,
        error: "blocked_address",
        response_status: null,
        next_attempt_at: null,
      });
      const [row] = await stack.notificationSql!<
        { n: number }[]
      >`select count(*)::int as n from notification.delivery_attempts where endpoint_id = ${id}`;
      expect(row!.n).toBe(1);
    }
    for (const path of ["/by-name", "/loopback", "/compat", "/6to4", "/nat64"]) expect(receiver.received(path)).toHaveLength(0);
  });
});
