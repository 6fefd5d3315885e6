import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Sql } from "@ledger/common";
import { startWebhookReceiver, type WebhookReceiver } from "@ledger/testing";
import { startStack, type Api, type Stack } from "@ledger/e2e";
import { updateEndpoint } from "./endpoints.js";

// Writes to destinations while deliveries are in flight: the workers, the consumer and the API
// touch the same endpoint and delivery rows, and a client must never see them collide (a 409
// `conflict` from a deadlock, or a 5xx).

let stack: Stack;
let api: Api;
let receiver: WebhookReceiver;
let sql: Sql;

beforeAll(async () => {
  receiver = await startWebhookReceiver();
  stack = await startStack({ notification: { webhookExtraCa: receiver.ca, webhookRetryScheduleMs: [50, 50, 50] } });
  api = stack.api;
  // A client of the notification database with room for the several transactions a test holds.
  const [row] = await stack.notificationSql!<{ name: string }[]>`select current_database() as name`;
  const url = new URL(stack.databaseUrl);
  url.pathname = `/${row!.name}`;
  sql = postgres(url.toString(), { max: 6, onnotice: () => {}, connection: { search_path: "notification" } }) as unknown as Sql;
});
afterAll(async () => {
  await sql?.end({ timeout: 2 });
  await stack?.close();
  await receiver?.close();
});

async function createEndpoint(client: Api, path: string, reply?: Parameters<WebhookReceiver["endpoint"]>[1]): Promise<string> {
  const res = await client.post("/webhooks", { url: receiver.endpoint(path, reply) });
  expect(res.status).toBe(200);
  return res.body.endpoint.endpoint_id;
}

/** Waits until some transaction of the notification database waits for a lock. */
async function someoneWaits(): Promise<void> {
  await expect
    .poll(
      async () =>
        (
          await sql<
            { n: number }[]
          >`select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`
        )[0]!.n,
      { timeout: 5_000, interval: 20 },
    )
    .toBeGreaterThan(0);
}

describe("PUT /webhooks with deliveries in flight", () => {
  it("never answers 409 or 5xx while the same destinations are updated in every order", async () => {
    const ids: string[] = [];
    // Some receivers fail, so deliveries stay pending and retry while the destinations change.
    for (let i = 0; i < 4; i++)
      ids.push(await createEndpoint(api, `/hammer-${i}`, (n) => (n % 3 === 0 ? { status: 500 } : { status: 200 })));
    const entity = (await api.post("/entity", { entity_name: "w", entity_type: "wallet" })).body.entity.entity_id;
    const until = Date.now() + 6_000;
    const statuses: number[] = [];
    const failures: unknown[] = [];
    const events = async () => {
      while (Date.now() < until) await api.post("/entity/fund", { entity_id: entity, amount: 1 });
    };
    const writer = async (order: string[], w: number) => {
      let round = 0;
      while (Date.now() < until) {
        round++;
        for (const id of order) {
          const body = round % 3 === 0 ? { endpoint_id: id, name: `w${w}-${round}` } : { endpoint_id: id, enabled: round % 3 !== 1 };
          const res = await api.put("/webhooks", body);
          statuses.push(res.status);
          if (res.status !== 200) failures.push(res.body);
        }
      }
    };
    const orders = [ids, [...ids].reverse(), [ids[1]!, ids[3]!, ids[0]!, ids[2]!], [ids[2]!, ids[0]!, ids[3]!, ids[1]!]];
    await Promise.all([events(), events(), ...orders.map((order, w) => writer(order, w))]);
    expect(failures).toEqual([]);
    expect(statuses.length).toBeGreaterThan(100);
    // Deliveries did go out meanwhile: the race was there to lose.
    const [attempts] = await sql<{ n: number }[]>`select count(*)::int as n from delivery_attempts`;
    expect(attempts!.n).toBeGreaterThan(20);
  });
});

describe("lock order", () => {
  it("a worker recording an attempt and a PUT disabling its destination do not deadlock", async () => {
    const { api: other, account } = await stack.newAccount("lock order");
    const id = await createEndpoint(other, "/lock-order");
    // A pending delivery due in an hour: no worker claims it while the test holds its row.
    const delivery = "whd_lockorder";
    await sql`insert into events (id, account_id, type, body, created_at) values ('evt_lockorder', ${account.account_id}, 'transaction.created', '{}', now())`;
    await sql`
      insert into deliveries (id, account_id, event_id, endpoint_id, status, next_attempt_at)
      values (${delivery}, ${account.account_id}, 'evt_lockorder', ${id}, 'pending', now() + interval '1 hour')`;

    // What a worker does when an attempt ends: its delivery row first, then the attempt row,
    // whose foreign key takes a share lock on the destination row.
    const worker = await sql.reserve();
    try {
      await worker`begin`;
      await worker`update deliveries set attempts = attempts + 1 where id = ${delivery}`;
      // Meanwhile PUT /webhooks disables the destination: it locks the destination row and then
      // waits for the delivery row, which the worker holds.
      const disabled = sql.begin((tx) => updateEndpoint(tx, account.account_id, id, { enabled: false }));
      disabled.catch(() => {});
      await someoneWaits();
      await worker`insert into delivery_attempts (delivery_id, endpoint_id, succeeded, duration_ms) values (${delivery}, ${id}, false, 1)`;
      await worker`commit`;
      await expect(disabled).resolves.toMatchObject({ enabled: false });
    } finally {
      await worker`rollback`.catch(() => {});
      worker.release();
    }
    const [row] = await sql<{ status: string; error: string }[]>`select status, error from deliveries where id = ${delivery}`;
    expect(row).toEqual({ status: "failed", error: "endpoint_disabled" });
  });
});
