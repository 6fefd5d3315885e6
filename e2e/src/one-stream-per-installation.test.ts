import { randomBytes } from "node:crypto";
import postgres from "postgres";
import { afterAll, beforeAll, expect, it } from "vitest";
import { startStack, type Stack } from "./index.js";

// Two installations (each with databases of its own) pointed at one NATS stream would share its
// durable consumer and each lose part of its events to the other. A service whose database is not
// the one the stream names for its events refuses to start; replicas on the same database share
// the stream as before.

let stack: Stack;
const otherDatabases: string[] = [];

beforeAll(async () => {
  stack = await startStack({ notification: {} });
});
afterAll(async () => {
  await stack?.close();
  const admin = postgres(stack.databaseUrl, { max: 1, onnotice: () => {} });
  for (const name of otherDatabases) await admin.unsafe(`drop database if exists "${name}" with (force)`).catch(() => {});
  await admin.end({ timeout: 2 });
});

/** A database of another installation, on the same server (made and migrated by the service that opens it). */
function otherDatabase(): string {
  const url = new URL(stack.databaseUrl);
  const name = `${decodeURIComponent(url.pathname.slice(1))}_other_${randomBytes(4).toString("hex")}`;
  otherDatabases.push(name);
  url.pathname = `/${name}`;
  return url.toString();
}

const refusal = () => new RegExp(`NATS stream ${stack.stream} belongs to another installation: .*set NATS_STREAM and NATS_SUBJECT_PREFIX`);

it("refuses a notification service of another database on the stream, and keeps one of the same database", async () => {
  await expect(stack.startNotificationReplica({ databaseUrl: otherDatabase() })).rejects.toThrow(refusal());
  const replica = await stack.startNotificationReplica();
  expect(replica.server.port).toBeGreaterThan(0);
});

it("refuses a ledger of another database on the stream, and keeps one of the same database", async () => {
  await expect(stack.startLedgerReplica({ databaseUrl: otherDatabase() })).rejects.toThrow(refusal());
  const replica = await stack.startLedgerReplica();
  expect(replica.server.port).toBeGreaterThan(0);
});

it("loses no event of the installation to the refused ones", async () => {
  const entity = (await stack.api.post("/entity", { entity_name: "funded", entity_type: "customer" })).body.entity.entity_id as string;
  const funded = await Promise.all(Array.from({ length: 20 }, () => stack.api.post("/entity/fund", { entity_id: entity, amount: 5 })));
  const groups = funded.map((answer) => answer.body.transaction.credit.transaction_group_id as string);
  const stored = async () => {
    const rows = await stack.notificationSql!<{ body: string }[]>`
      select body from events where account_id = ${stack.account.account_id} and type = 'transaction.created'`;
    const seen = new Set(rows.map((row) => JSON.parse(row.body).data.transaction_group_id as string));
    return groups.filter((group) => seen.has(group)).length;
  };
  await expect.poll(stored).toBe(groups.length);
});
