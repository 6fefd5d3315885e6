import { readFileSync } from "node:fs";
import { createServer } from "node:net";
import { describe, expect, it } from "vitest";
import { freePort } from "./own-nats.js";

// A port from the kernel's ephemeral range can be taken as the local end of an outgoing
// connection between freePort and the child's listen, so freePort stays below that range.
describe("freePort", () => {
  it("gives distinct ports below the ephemeral range that can be listened on", async () => {
    const low = Number(readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/)[0]);
    const ports = await Promise.all(Array.from({ length: 20 }, () => freePort()));
    for (const port of ports) expect(port).toBeLessThan(low);
    expect(new Set(ports).size).toBe(ports.length);
    for (const port of ports.slice(0, 3)) {
      const server = createServer();
      await new Promise<void>((resolve, reject) => {
        server.once("error", reject);
        server.listen(port, "127.0.0.1", () => resolve());
      });
      await new Promise((resolve) => server.close(resolve));
    }
  });
});
