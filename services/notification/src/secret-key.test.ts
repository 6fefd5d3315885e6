import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, expect, it } from "vitest";
import { startStack, type Stack } from "@ledger/e2e";

// A notification process whose NOTIFICATION_SECRET_KEY cannot open the stored signing secrets
// would claim deliveries and fail every attempt, its neighbours' included; it must not start.

let stack: Stack;

beforeAll(async () => {
  stack = await startStack({ notification: {} });
});
afterAll(async () => {
  await stack?.close();
});

it("refuses to start with a key that does not open the stored secrets, and starts with the one that does", async () => {
  // Before any destination exists there is nothing to check: any key starts.
  const early = await stack.startNotificationReplica({ secretKey: randomBytes(32) });
  await early.close();

  const created = await stack.api.post("/webhooks", { url: "https://127.0.0.1:9/hook" });
  expect(created.status).toBe(200);

  await expect(stack.startNotificationReplica({ secretKey: randomBytes(32) })).rejects.toThrow(/NOTIFICATION_SECRET_KEY does not open/);
  const replica = await stack.startNotificationReplica();
  await replica.close();
});
