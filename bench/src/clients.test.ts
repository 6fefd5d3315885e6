import http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { create } from "@bufbuild/protobuf";
import { createClient } from "@connectrpc/connect";
import { connectNodeAdapter, createConnectTransport } from "@connectrpc/connect-node";
import { notFound, ruleViolation } from "@ledger/common";
import { LedgerService, TransactionGroupSchema } from "@ledger/proto/ledger/v1/ledger_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CallError, errorCode, leanClient } from "./clients.js";

// The bench's lean client must read answers and count failures exactly as Connect-ES's client
// does, or switching clients would change what the RPC cells report.
describe.each(["frames", "http2"] as const)("leanClient over %s", (wire) => {
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
