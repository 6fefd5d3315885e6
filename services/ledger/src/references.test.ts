import { sqlState, type Tx } from "@ledger/common";
import { startStack, type Stack } from "@ledger/e2e";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { GroupRow } from "./groups.js";
import { persist } from "./money-persist.js";

// Groups and legs name their account, program, group and entity without foreign keys: the write
// statement counts what they name that does not exist and fails as a whole with 23503
// (migrations/0007_reference_checks_per_statement.sql). Each case writes one group through that
// statement, the only writer of groups and legs, and checks what was left in the database.

let stack: Stack;
let entityA: string;
let entityB: string;
beforeAll(async () => {
  stack = await startStack();
  const client = stack.ledgerClient(stack.account.api_key);
  const entity = async () => (await client.createEntity({ entityName: "ref", entityType: "wallet" })).entity!.entityId;
  [entityA, entityB] = await Promise.all([entity(), entity()]);
});
afterAll(async () => stack?.close());

let serial = 0;

/** A posted two-leg group of 1 from `from` to `to`, in `programId` of `accountId`. */
function group(accountId: string, programId: string, from: string, to: string): GroupRow {
  const id = `trx-grp_refcheck${Date.now()}${serial++}`;
  const now = new Date();
  const leg = (position: number, entity_id: string, direction: "debit" | "credit") => ({
    id: `${id}_leg${position}`,
    group_id: id,
    position,
    entity_id,
    direction,
    amount: 1n,
    created_at: now,
  });
  return {
    id,
    account_id: accountId,
    program_id: programId,
    status: "posted",
    description: "reference check",
    metadata: null,
    currency_code: "USD",
    amount: 1n,
    disputed: false,
    reason: "",
    reverses_group_id: null,
    reversed_by_group_id: null,
    created_at: now,
    updated_at: now,
    legs: [leg(0, from, "debit"), leg(1, to, "credit")],
  };
}

/** Writes `groups` (and their legs) through the write statement; the SQLSTATE it failed with, or "ok". */
async function write(groups: GroupRow[]): Promise<string> {
  try {
    await stack.sql.begin((tx) =>
      persist(
        tx as unknown as Tx,
        {
          changedEntities: [],
          newGroups: groups,
          changedGroups: [],
          newReservations: [],
          changedReservations: [],
          newCaptures: [],
          postedLegs: [],
        },
        [],
        new Date(),
        [],
        [],
      ),
    );
    return "ok";
  } catch (err) {
    return sqlState(err) ?? String(err);
  }
}

async function stored(groups: GroupRow[]): Promise<{ groups: number; legs: number }> {
  const ids = groups.map((g) => g.id);
  const [row] = await stack.sql<{ groups: bigint; legs: bigint }[]>`
    select (select count(*) from transaction_groups where id = any(${ids})) as groups,
           (select count(*) from legs where group_id = any(${ids})) as legs`;
  return { groups: Number(row!.groups), legs: Number(row!.legs) };
}

describe("references of new groups and legs", () => {
  it("writes a group whose program, account and entities exist", async () => {
    const ok = group(stack.account.account_id, stack.account.program_id, entityA, entityB);
    expect(await write([ok])).toBe("ok");
    expect(await stored([ok])).toEqual({ groups: 1, legs: 2 });
  });

  const refused: Array<[string, () => Promise<GroupRow[]>]> = [
    [
      "a leg to an entity that does not exist",
      async () => [group(stack.account.account_id, stack.account.program_id, entityA, "ent_nonexistent")],
    ],
    ["a program that does not exist", async () => [group(stack.account.account_id, "prg_nonexistent", entityA, entityB)]],
    ["an account that does not exist", async () => [group("acct_nonexistent", stack.account.program_id, entityA, entityB)]],
    [
      "a program of another account",
      async () => {
        const other = await stack.newAccount("references");
        return [group(stack.account.account_id, other.account.program_id, entityA, entityB)];
      },
    ],
    [
      "a leg to an entity of another account",
      async () => {
        const other = await stack.newAccount("references-entity");
        const [row] = await stack.sql<{ id: string }[]>`
          select id from entities where account_id = ${other.account.account_id} and program_id = ${other.account.program_id} limit 1`;
        return [group(stack.account.account_id, stack.account.program_id, entityA, row!.id)];
      },
    ],
    [
      "a leg whose group is not written with it",
      async () => {
        const orphan = group(stack.account.account_id, stack.account.program_id, entityA, entityB);
        orphan.legs[1]!.group_id = "trx-grp_nonexistent";
        return [orphan];
      },
    ],
  ];
  for (const [name, make] of refused) {
    it(`refuses ${name} with foreign_key_violation and writes nothing of the statement`, async () => {
      const bad = await make();
      // A valid group in the same statement is not written either: the statement fails as a whole.
      const good = group(stack.account.account_id, stack.account.program_id, entityA, entityB);
      expect(await write([good, ...bad])).toBe("23503");
      expect(await stored([good, ...bad])).toEqual({ groups: 0, legs: 0 });
    });
  }
});
