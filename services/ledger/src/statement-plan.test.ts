import { ledgerViolations, schemaClient, startStack, type Stack } from "@ledger/e2e";
import { afterAll, beforeAll, expect, it } from "vitest";
import type { Sql } from "@ledger/common";
import { findEntity } from "./entities.js";
import { statementPage, statementRequest } from "./history.js";

// A statement page takes its legs in the index's order first and then probes each one's group for
// its description (docs/architecture.md#balance-history). Written as one join, the planner chose
// to hash every group of the account for windows it expected to be short: planned window by
// window on a long history, one page in eight took four times as long, and more as the account
// grows (a generic plan would choose it once, for every page). This holds the statement
// to the shape that cannot do that: the groups are never an input of a join, only probed per leg,
// even with nested-loop joins switched off, where a join would have to hash or merge them whole.

let stack: Stack;

beforeAll(async () => {
  stack = await startStack();
});
afterAll(async () => stack?.close());

interface PlanNode {
  "Node Type": string;
  "Parent Relationship"?: string;
  "Relation Name"?: string;
  Plans?: PlanNode[];
}

/** The tables read beneath a join of `node`, not counting subplans run per row (a per-leg probe is one). */
function joinedTables(node: PlanNode, underJoin = false): string[] {
  const joining = underJoin || /Join|Nested Loop/.test(node["Node Type"]);
  const own = joining && node["Relation Name"] ? [node["Relation Name"]] : [];
  const below = (node.Plans ?? [])
    .filter((child) => child["Parent Relationship"] !== "SubPlan" && child["Parent Relationship"] !== "InitPlan")
    .flatMap((child) => joinedTables(child, joining));
  return [...own, ...below];
}

it("reads a page's legs by range and each one's group by key, never the account's groups as a join input", async () => {
  const created = await stack.api.post("/entity", { entity_name: "statement plan", entity_type: "wallet" });
  const entityId = created.body.entity.entity_id as string;
  const other = (await stack.api.post("/entity", { entity_name: "other", entity_type: "wallet" })).body.entity.entity_id as string;
  expect((await stack.api.post("/entity/fund", { entity_id: entityId, amount: 1000 })).status).toBe(200);
  for (let i = 0; i < 5; i++) {
    const res = await stack.api.post("/transaction", {
      description: `payment ${i}`,
      amount: 10 + i,
      status: "posted",
      account: { from: entityId, to: other },
    });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
  }

  const statements: Array<{ query: string; params: unknown[] }> = [];
  const sql = schemaClient(stack.databaseUrl, "ledger", 1, (_connection, query, params) =>
    statements.push({ query, params: [...params] }),
  ) as unknown as Sql;
  try {
    const [row] = await sql<
      Array<{ account_id: string; program_id: string }>
    >`select account_id, program_id from entities where id = ${entityId}`;
    const entity = await findEntity(sql, row!.account_id, row!.program_id, entityId);
    statements.length = 0;
    const page = await statementPage(sql, entity, statementRequest(0n, BigInt(Date.now() + 60_000) * 1000n, 1000, ""));
    expect(page.entries?.map((e) => e.description)).toEqual(["Deposit", "payment 0", "payment 1", "payment 2", "payment 3", "payment 4"]);
    expect(statements).toHaveLength(1);

    const [{ query, params }] = statements as [{ query: string; params: unknown[] }];
    const plan = await sql.begin(async (tx) => {
      await tx`set local enable_nestloop = off`;
      const [explained] = await tx.unsafe<Array<{ "QUERY PLAN": Array<{ Plan: PlanNode }> }>>(
        `explain (format json) ${query}`,
        params as never[],
      );
      return explained!["QUERY PLAN"][0]!.Plan;
    });
    expect(JSON.stringify(plan)).toContain('"Relation Name":"transaction_groups"');
    expect(joinedTables(plan)).not.toContain("transaction_groups");
  } finally {
    await sql.end();
  }
  expect(await ledgerViolations(stack.sql, stack.account.account_id)).toEqual([]);
});
