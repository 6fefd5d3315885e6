import * as http from "node:http";
import pino from "pino";
import { afterEach, expect, it } from "vitest";
import { listen, type RunningServer } from "./server.js";

// The last-resort handler: whatever a request handler throws or rejects with ends that one
// request with a 500, never the process.

let server: RunningServer | undefined;
afterEach(async () => {
  await server?.close();
  server = undefined;
});

function get(url: string, path: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    http
      .get(url + path, { agent: false }, (res) => {
        let body = "";
        res.setEncoding("utf8");
        res.on("data", (chunk: string) => (body += chunk));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
      })
      .on("error", reject)
      // A request the server never answers fails fast instead of at the test timeout.
      .setTimeout(5_000, function (this: http.ClientRequest) {
        this.destroy(new Error("no answer"));
      });
  });
}

it.each([
  [
    "throws",
    () => {
      throw new Error("boom");
    },
  ],
  [
    "rejects",
    async () => {
      throw new Error("boom");
    },
  ],
])("a fallback that %s answers 500 in the envelope, and the server keeps serving", async (_how, fail) => {
  const logged: unknown[] = [];
  const log = pino({ level: "error" }, { write: (line: string) => void logged.push(JSON.parse(line)) });
  server = await listen({
    name: "test",
    host: "127.0.0.1",
    port: 0,
    log,
    fallback: (req, res) => {
      if (req.url === "/fail") return fail();
      (res as http.ServerResponse).end("ok");
      return undefined;
    },
    readiness: {},
  });
  const res = await get(server.url, "/fail");
  expect(res.status).toBe(500);
  expect(JSON.parse(res.body)).toMatchObject({ status: "error", error: { code: "internal" } });
  expect(res.body).not.toContain("boom");
  expect(logged).toContainEqual(
    expect.objectContaining({ method: "GET", path: "/fail", err: expect.objectContaining({ message: "boom" }) }),
  );
  expect(await get(server.url, "/fine")).toEqual({ status: 200, body: "ok" });
  expect((await get(server.url, "/healthz")).status).toBe(200);
});
