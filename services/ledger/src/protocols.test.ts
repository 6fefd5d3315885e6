import { createClient } from "@connectrpc/connect";
import { createGrpcTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, expect, it } from "vitest";
import { startStack, type Stack } from "@ledger/e2e";
import { createLedgerClients, holdV1, ledgerV1 } from "@ledger/client";
import { LedgerService } from "@ledger/proto/ledger/v1/ledger_pb.js";

// Internal callers may speak gRPC or gRPC-Web as well as Connect: one port serves all three.

let stack: Stack;
beforeAll(async () => {
  stack = await startStack();
});
afterAll(async () => stack?.close());

it.each([
  ["gRPC", () => createGrpcTransport({ baseUrl: stack.ledgerUrl })],
  ["gRPC-Web", () => createGrpcWebTransport({ baseUrl: stack.ledgerUrl, httpVersion: "1.1" })],
])("answers %s calls with the same data and errors", async (_name, transport) => {
  const ledger = createClient(LedgerService, transport());
  const headers = { authorization: stack.account.api_key };
  const { program } = await ledger.getProgram({}, { headers });
  expect(program!.programId).toBe(stack.account.program_id);
  const { entity } = await ledger.createEntity({ entityName: "grpc", entityType: "w" }, { headers });
  await ledger.fundEntity({ entityId: entity!.entityId, amount: 42n }, { headers });
  const read = await ledger.getEntity({ entityId: entity!.entityId }, { headers });
  expect(read.entity!.balances!.posted).toBe(42n);
  await expect(ledger.getProgram({}, { headers: { authorization: "lsk_wrong" } })).rejects.toMatchObject({ code: 16 });
  await expect(ledger.fundEntity({ entityId: entity!.entityId, amount: 0n }, { headers })).rejects.toMatchObject({ code: 3 });
});

it("serves the published client package over Connect and gRPC alike", async () => {
  for (const protocol of ["connect", "grpc"] as const) {
    const { ledger, hold } = createLedgerClients({
      ledgerUrl: stack.ledgerUrl,
      holdUrl: stack.hold!.server.url,
      apiKey: stack.account.api_key,
      protocol,
    });
    const { entity } = await ledger.createEntity({ entityName: protocol, entityType: "w" });
    await ledger.fundEntity({ entityId: entity!.entityId, amount: 10n }, { headers: { "idempotency-key": `fund-${protocol}` } });
    const created = await hold!.createHold({ entityId: entity!.entityId, amount: 4n });
    expect(created.hold).toMatchObject({ status: holdV1.HoldStatus.HELD, amount: 4n });
    expect((await ledger.getEntity({ entityId: entity!.entityId })).entity!.status).toBe(ledgerV1.EntityStatus.ACTIVE);
    const listed = await hold!.listHolds({ entityId: entity!.entityId, status: holdV1.HoldStatus.HELD });
    expect(listed.holds.map((h) => h.holdId)).toEqual([created.hold!.holdId]);
    expect((await hold!.listHolds({ entityId: entity!.entityId, status: holdV1.HoldStatus.CAPTURED })).holds).toEqual([]);
    expect((await ledger.getEntity({ entityId: entity!.entityId })).entity!.balances).toMatchObject({
      posted: 10n,
      held: 4n,
      available: 6n,
    });
  }
});
