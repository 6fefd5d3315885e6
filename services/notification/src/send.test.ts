import { createServer } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startWebhookReceiver, type WebhookReceiver } from "@ledger/testing";
import { sendOnce } from "./send.js";

// One attempt against a real HTTPS server: how failures are named in a delivery's `error`.

let receiver: WebhookReceiver;
beforeAll(async () => {
  receiver = await startWebhookReceiver();
});
afterAll(async () => receiver?.close());

const options = { timeoutMs: 2_000, allowPrivateNetworks: true, userAgent: "test" };

async function closedPort(): Promise<number> {
  return new Promise((resolve) => {
    const server = createServer();
    server.listen(0, "127.0.0.1", () => {
      const port = (server.address() as { port: number }).port;
      server.close(() => resolve(port));
    });
  });
}

describe("one attempt", () => {
  it("reads the status, the first 1 KiB and Retry-After", async () => {
    const url = new URL(receiver.endpoint("/send-429", () => ({ status: 429, body: "y".repeat(3_000), headers: { "retry-after": "7" } })));
    const result = await sendOnce(url, "{}", { "content-type": "application/json" }, { ...options, extraCa: receiver.ca });
    expect(result).toMatchObject({ status: 429, error: "", retryAfterSeconds: 7 });
    expect(result.bodyExcerpt).toBe("y".repeat(1024));
    expect(receiver.received("/send-429")[0]!.body).toBe("{}");
  });

  it("names an untrusted certificate `tls` and a closed port `connection_refused`", async () => {
    const untrusted = await sendOnce(new URL(receiver.endpoint("/send-tls")), "{}", {}, options);
    expect(untrusted).toMatchObject({ status: 0, error: "tls" });
    expect(receiver.received("/send-tls")).toHaveLength(0);
    const refused = await sendOnce(new URL(`https://127.0.0.1:${await closedPort()}/`), "{}", {}, options);
    expect(refused).toMatchObject({ status: 0, error: "connection_refused" });
  });

  it("verifies the certificate against the URL's host name while connecting to the checked address", async () => {
    // localhost resolves (and is checked) to 127.0.0.1; TLS still checks the name `localhost`.
    const url = new URL(receiver.endpoint("/send-name").replace("127.0.0.1", "localhost"));
    const result = await sendOnce(url, "{}", {}, { ...options, extraCa: receiver.ca });
    expect(result).toMatchObject({ status: 200, error: "" });
    expect(receiver.received("/send-name")[0]!.headers.host).toBe(url.host);
  });
});

describe("connections to a destination", () => {
  const send = (url: string, timeoutMs = 5_000) => sendOnce(new URL(url), "{}", {}, { ...options, timeoutMs, extraCa: receiver.ca });

  it("carries many attempts at once to a fast receiver on a few connections", async () => {
    const before = receiver.connections();
    const results = await Promise.all(Array.from({ length: 100 }, () => send(receiver.endpoint("/gate-fast"))));
    expect(results.every((r) => r.status === 200)).toBe(true);
    expect(receiver.received("/gate-fast")).toHaveLength(100);
    // One connection per attempt was 100; the gate opens what the answers keep busy, at least 4.
    // Until the first answers arrive it also opens one more every 10 ms, so on a loaded machine
    // (the rest of the suite beside it) slow first handshakes add some: 25 seen, against 4-20 idle.
    const opened = receiver.connections() - before;
    expect(opened).toBeGreaterThanOrEqual(1);
    expect(opened).toBeLessThanOrEqual(50);
  });

  it("opens a connection per attempt for a slow receiver within a fraction of its answer time", async () => {
    const url = receiver.endpoint("/gate-slow", () => ({ status: 200, delayMs: 500 }));
    const before = receiver.connections();
    const results = await Promise.all(Array.from({ length: 40 }, () => send(url)));
    expect(results.every((r) => r.status === 200)).toBe(true);
    // All 40 reached the receiver within a second: on four connections they would have come in
    // ten waves of 500 ms.
    const arrivals = receiver.received("/gate-slow").map((r) => r.at);
    expect(Math.max(...arrivals) - Math.min(...arrivals)).toBeLessThan(1_000);
    expect(receiver.connections() - before).toBeGreaterThanOrEqual(30);
  });

  it("keeps a pool per destination, so one that hangs does not hold back another on the same host", async () => {
    const hung = Array.from({ length: 8 }, () =>
      send(
        receiver.endpoint("/gate-hang", () => "hang"),
        3_000,
      ),
    );
    let hungSettled = 0;
    for (const p of hung) void p.then(() => hungSettled++);
    const fast = await Promise.all(Array.from({ length: 20 }, () => send(receiver.endpoint("/gate-beside"))));
    expect(fast.every((r) => r.status === 200)).toBe(true);
    expect(hungSettled).toBe(0);
    const ended = await Promise.all(hung);
    expect(ended.every((r) => r.error === "timeout")).toBe(true);
  });
});
