import fc from "fast-check";
import { afterAll, beforeAll, expect, it } from "vitest";
import { startStack, type ApiResponse, type Stack } from "@ledger/e2e";
import { holdRoutes } from "./hold-routes.js";
import { notificationRoutes } from "./notification-routes.js";
import { ledgerRoutes, type Route } from "./routes.js";

// Random and malformed input to every REST endpoint: never a 5xx, always the error
// envelope, and a refused call never changes the ledger. Real ids are mixed into the values, so
// some calls get deep enough to reach the business rules and some succeed.

const routes: Route[] = [...ledgerRoutes, ...holdRoutes, ...notificationRoutes];
let stack: Stack;
let ids: string[] = [];

beforeAll(async () => {
  stack = await startStack({ notification: {} });
  const { api } = stack;
  const a = (await api.post("/entity", { entity_name: "a", entity_type: "w" })).body.entity.entity_id;
  const b = (await api.post("/entity", { entity_name: "b", entity_type: "w" })).body.entity.entity_id;
  await api.post("/entity/fund", { entity_id: a, amount: 1_000 });
  const group = (await api.post("/transaction", { description: "p", amount: 5, account: { from: a, to: b } })).body.transaction_group_id;
  const hold = (await api.post("/hold", { entity_id: a, amount: 5 })).body.hold.hold_id;
  const endpoint = (await api.post("/webhooks", { url: "https://example.test/hook" })).body.endpoint.endpoint_id;
  const program = (await api.get("/program")).body.program.program_id;
  ids = [a, b, group, hold, endpoint, program];
}, 60_000);
afterAll(async () => stack?.close());

/** Everything a refused call must leave as it was. */
async function ledgerState(): Promise<string> {
  const [row] = await stack.sql`
    select coalesce(sum(posted), 0)::text as posted, coalesce(sum(pending_debits), 0)::text as pd,
           coalesce(sum(pending_credits), 0)::text as pc, coalesce(sum(held), 0)::text as held, count(*)::text as entities,
           (select count(*) from transaction_groups where account_id = ${stack.account.account_id})::text as groups,
           (select string_agg(status, ',' order by id) from transaction_groups where account_id = ${stack.account.account_id}) as statuses
    from entities where account_id = ${stack.account.account_id}`;
  return JSON.stringify(row);
}

const scalar = fc.oneof(
  fc.constantFrom(
    ...["", " ", "\u0000", "null", "-1", "0", "1.5", "9007199254740993", "pending", "posted", "https://x", "ent_", "<script>"],
  ),
  fc.string({ maxLength: 40 }),
  fc.integer(),
  fc.double(),
  fc.boolean(),
  fc.constant(null),
  fc.constant(1),
  fc.constant(10),
);

function valueFor(): fc.Arbitrary<unknown> {
  return fc.oneof(
    { weight: 3, arbitrary: scalar },
    { weight: 3, arbitrary: fc.constantFrom(...(ids.length ? ids : ["x"])) },
    { weight: 1, arbitrary: fc.jsonValue({ maxDepth: 2 }) },
  );
}

function requestFor(route: Route) {
  const known = [...(route.method === "GET" || route.method === "DELETE" ? (route.query ?? []) : (route.body ?? []))];
  const names = fc.constantFrom(...known, "unknown_field", "amount", "__proto__");
  const fields = fc.dictionary(known.length ? fc.oneof(fc.constantFrom(...known), names) : names, valueFor(), { maxKeys: 5 });
  return fc.record({
    fields,
    raw: fc.option(fc.oneof(fc.string({ maxLength: 30 }), fc.constantFrom("{", "[]", "null", "1", '{"a":', "\u0000")), { freq: 6 }),
    programId: fc.option(fc.oneof(fc.string({ maxLength: 20 }), fc.constantFrom(...(ids.length ? ids : ["x"]))), { freq: 3 }),
    idempotencyKey: fc.option(fc.string({ maxLength: 300 }), { freq: 4 }),
  });
}

it("never answers 5xx, always uses the envelope, and a refused call changes nothing", async () => {
  let calls = 0;
  let refused = 0;
  const statuses = new Map<number, number>();
  for (const route of routes) {
    await fc.assert(
      fc.asyncProperty(requestFor(route), async (r) => {
        const before = await ledgerState();
        const headers: Record<string, string> = {};
        if (r.programId !== null && /^[\x20-\x7e]*$/.test(r.programId)) headers["program_id"] = r.programId;
        if (r.idempotencyKey !== null && /^[\x20-\x7e]*$/.test(r.idempotencyKey)) headers["idempotency-key"] = r.idempotencyKey;
        let res: ApiResponse;
        if (route.method === "GET" || route.method === "DELETE") {
          const query = Object.fromEntries(Object.entries(r.fields).map(([k, v]) => [k, typeof v === "string" ? v : JSON.stringify(v)]));
          res = await stack.api.request(route.method, route.path, { query, headers });
        } else if (r.raw !== null) {
          res = await stack.api.request(route.method, route.path, {
            raw: r.raw,
            headers: { ...headers, "content-type": "application/json" },
          });
        } else {
          res = await stack.api.request(route.method, route.path, { body: r.fields, headers });
        }
        calls++;
        statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
        expect(res.status, `${route.method} ${route.path} ${JSON.stringify(r)} -> ${JSON.stringify(res.body)}`).toBeLessThan(500);
        expect(typeof res.body).toBe("object");
        if (res.status >= 400) {
          refused++;
          expect(res.body.status).toBe("error");
          expect(typeof res.body.error.code).toBe("string");
          expect(typeof res.body.error.message).toBe("string");
          expect(await ledgerState(), `${route.method} ${route.path} ${JSON.stringify(r)}`).toBe(before);
        } else {
          expect(res.body.status).toBe("success");
        }
      }),
      { numRuns: 40, seed: 20261122 },
    );
  }
  console.log("hostile input: calls by status", Object.fromEntries(statuses));
  // The property reached every endpoint, and most random calls were refused, as they should be.
  expect(calls).toBe(routes.length * 40);
  expect(refused).toBeGreaterThan(calls / 2);
}, 300_000);
