import http from "node:http";
import http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { create } from "@bufbuild/protobuf";
import { createClient } from "@connectrpc/connect";
import { connectNodeAdapter, createConnectTransport } from "@connectrpc/connect-node";
import { notFound, ruleViolation } from "@ledger/common";
import { LedgerService, TransactionGroupSchema } from "@ledger/proto/ledger/v1/ledger_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CallError, errorCode, leanClient, restClient } from "./clients.js";

// The bench's lean client must read answers and count failures exactly as Connect-ES's client
// does, or switching clients would change what the RPC cells report.
describe.each(["by-hand", "http2"] as const)("leanClient over %s", (wire) => {
  let server: http2.Http2Server;
  let baseUrl: string;
  const seen: string[] = [];
  // Connect-ES's client keeps its session open: the server ends every session itself.
  const sessions = new Set<http2.ServerHttp2Session>();

  beforeAll(async () => {
    const handler = connectNodeAdapter({
      routes: (router) =>
        router.service(LedgerService, {
          createTransaction: (req, ctx) => {
            seen.push(ctx.requestHeader.get("authorization") ?? "");
            const form = req.form.case === "transfer" ? req.form.value : undefined;
            return { transactionGroup: create(TransactionGroupSchema, { transactionGroupId: `tg_${form?.fromEntityId}_${form?.amount}` }) };
          },
          fundEntity: () => {
            throw ruleViolation("insufficient_funds", "not enough");
          },
          getEntity: () => {
            throw notFound("entity", "ent_missing");
          },
        }),
    });
    server = http2.createServer(handler);
    server.on("session", (session) => sessions.add(session));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    for (const session of sessions) session.destroy();
    await new Promise((resolve) => server.close(resolve));
  });

  it("sends the request with the API key and decodes the answer", async () => {
    const lean = leanClient(LedgerService, baseUrl, "key_lean", wire);
    try {
      const res = await lean.client.createTransaction({
        form: { case: "transfer", value: { fromEntityId: "ent_a", toEntityId: "ent_b", amount: 7n } },
      });
      expect(res.transactionGroup?.transactionGroupId).toBe("tg_ent_a_7");
      expect(seen).toContain("key_lean");
    } finally {
      lean.close();
    }
  });

  it("counts a refusal under the same code as Connect-ES's client", async () => {
    const lean = leanClient(LedgerService, baseUrl, "key_lean", wire);
    const connect = createClient(LedgerService, createConnectTransport({ baseUrl, httpVersion: "2", useBinaryFormat: true }));
    try {
      for (const call of [
        (c: typeof lean.client) => c.fundEntity({ entityId: "ent_a", amount: 1n }),
        (c: typeof lean.client) => c.getEntity({ entityId: "ent_missing" }),
      ]) {
        const leanError = await call(lean.client).then(
          () => undefined,
          (err: unknown) => err,
        );
        const connectError = await call(connect).then(
          () => undefined,
          (err: unknown) => err,
        );
        expect(leanError).toBeInstanceOf(CallError);
        expect(errorCode(leanError)).toBe(errorCode(connectError));
      }
      expect(errorCode(await lean.client.fundEntity({ entityId: "ent_a", amount: 1n }).catch((err: unknown) => err))).toBe(
        "insufficient_funds",
      );
    } finally {
      lean.close();
    }
  });
});

// The REST cells' client must read answers and error envelopes the same way over either wire.
describe.each(["by-hand", "node"] as const)("restClient over %s", (wire) => {
  let server: http.Server;
  let restUrl: string;
  beforeAll(async () => {
    server = http.createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", () => {
        const body = JSON.parse(Buffer.concat(chunks).toString()) as { amount: number };
        res.setHeader("content-type", "application/json");
        if (req.url !== "/v1/transaction" || req.headers.authorization !== "key_rest") res.writeHead(404).end("not json");
        else if (body.amount > 10) res.writeHead(409).end(JSON.stringify({ error: { code: "insufficient_funds", message: "not enough" } }));
        else res.writeHead(200).end(JSON.stringify({ id: `tg_${body.amount}`, method: req.method }));
      });
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    restUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });

  it("returns the answer's JSON and counts a refusal under its envelope's code, else the status", async () => {
    const rest = restClient(restUrl, "key_rest", 2, wire);
    try {
      expect(await rest.post("/transaction", { amount: 5 })).toEqual({ id: "tg_5", method: "POST" });
      expect(await rest.send("PUT", "/transaction", { amount: 6 })).toEqual({ id: "tg_6", method: "PUT" });
      await expect(rest.post("/transaction", { amount: 11 })).rejects.toEqual(new CallError("insufficient_funds"));
      await expect(rest.post("/elsewhere", { amount: 1 })).rejects.toEqual(new CallError("http_404"));
    } finally {
      rest.close();
    }
  });
});
