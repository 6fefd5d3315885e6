import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { errorCodeOf } from "@ledger/common";
import type { EntityRow } from "./entities.js";
import { Book, entityState, type BookEntity, type MoneyCommand, type Outcome } from "./money-rules.js";

// The pure money rules, with no database: a set of commands applied in one book must come to
// exactly what applying them one by one (each in a book of its own, as separate transactions
// would) comes to, and money is conserved whatever mix of them is refused.

const ACCOUNT = "acct_1";
const PROGRAM = "prog_1";
const EXTERNAL = "ent_external";
const ORDINARY = ["ent_a", "ent_b", "ent_c", "ent_d"];
const OTHER_ACCOUNT = "ent_theirs";

/** An entity row as the book reads it, with the entity's other columns. */
type TestRow = EntityRow & BookEntity;

function row(id: string, balances: Partial<Pick<EntityRow, "posted" | "pending_debits" | "pending_credits" | "held">> = {}): TestRow {
  return {
    id,
    version: "1",
    account_id: id === OTHER_ACCOUNT ? "acct_2" : ACCOUNT,
    program_id: PROGRAM,
    name: id,
    type: "wallet",
    status: "active",
    currency_code: "USD",
    metadata: null,
    is_external: id === EXTERNAL,
    posted: 0n,
    pending_debits: 0n,
    pending_credits: 0n,
    held: 0n,
    created_at: new Date(0),
    ...balances,
  };
}

/** A book over `rows`, as money-load.ts would build it after reading them. */
function bookOf(rows: TestRow[]): Book {
  return new Book({
    entities: new Map(rows.map((r) => [r.id, entityState(r)])),
    groups: new Map(),
    reservations: new Map(),
    captures: new Map(),
    externalIdFor: () => EXTERNAL,
    now: new Date(0),
  });
}

/** The rows as the book's write would leave them (external entities receive their deltas). */
function rowsAfter(book: Book, rows: TestRow[]): TestRow[] {
  return rows.map((r) => {
    const s = book.entity(r.id)!;
    return r.is_external
      ? {
          ...r,
          posted: r.posted + s.posted,
          pending_debits: r.pending_debits + s.pendingDebits,
          pending_credits: r.pending_credits + s.pendingCredits,
        }
      : { ...r, posted: s.posted, pending_debits: s.pendingDebits, pending_credits: s.pendingCredits, held: s.held };
  });
}

const balancesOf = (rows: TestRow[]) => rows.map((r) => [r.id, r.posted, r.pending_debits, r.pending_credits, r.held]);
const summary = (o: Outcome) => (o.ok ? "ok" : errorCodeOf(o.error).code);

const base = { accountId: ACCOUNT, programId: PROGRAM, requestId: "req", traceparent: "" };
const entityId = fc.constantFrom(...ORDINARY, ORDINARY[0]!, EXTERNAL, OTHER_ACCOUNT, "ent_missing");
const amount = fc.bigInt({ min: 1n, max: 500n });
const command: fc.Arbitrary<MoneyCommand> = fc.oneof(
  fc.record({ from: entityId, to: entityId, amount, status: fc.constantFrom("posted" as const, "pending" as const) }).map(
    ({ from, to, amount, status }): MoneyCommand => ({
      kind: "create",
      ...base,
      description: "t",
      metadata: null,
      status,
      legs: [
        { entityId: from, direction: "debit", amount },
        { entityId: to, direction: "credit", amount },
      ],
    }),
  ),
  fc
    .record({ kind: fc.constantFrom("fund" as const, "defund" as const), entityId: fc.constantFrom(...ORDINARY), amount })
    .map(({ kind, entityId, amount }): MoneyCommand => ({ kind, ...base, entityId, amount, description: kind })),
);
const startRows = fc
  .tuple(...ORDINARY.map(() => fc.bigInt({ min: 0n, max: 1000n })))
  .map((amounts) => [
    row(EXTERNAL, { posted: -amounts.reduce((a, b) => a + b, 0n) }),
    ...ORDINARY.map((id, i) => row(id, { posted: amounts[i]! })),
    row(OTHER_ACCOUNT),
  ]);

describe("money rules (pure)", () => {
  it("a batch applied in one book equals its items applied one by one: same outcomes, same balances", () => {
    fc.assert(
      fc.property(startRows, fc.array(command, { minLength: 1, maxLength: 40 }), (rows, commands) => {
        const together = bookOf(rows);
        const outcomes = commands.map((c) => summary(together.apply(c)));

        let current = rows;
        const alone = commands.map((c) => {
          const book = bookOf(current);
          const outcome = summary(book.apply(c));
          current = rowsAfter(book, current);
          return outcome;
        });
        expect(outcomes).toEqual(alone);
        expect(balancesOf(rowsAfter(together, rows))).toEqual(balancesOf(current));
        // One group and one event per applied command, nothing for a refused one.
        const effects = together.effects();
        const applied = outcomes.filter((o) => o === "ok").length;
        expect(effects.newGroups).toHaveLength(applied);
        expect(effects.events).toHaveLength(applied);
      }),
      { numRuns: 300 },
    );
  });

  it("conserves money and keeps available at zero or more, whatever is refused", () => {
    fc.assert(
      fc.property(startRows, fc.array(command, { minLength: 1, maxLength: 40 }), (rows, commands) => {
        const book = bookOf(rows);
        for (const c of commands) book.apply(c);
        const after = rowsAfter(book, rows);
        const total = (rs: TestRow[], pick: (r: TestRow) => bigint) => rs.reduce((sum, r) => sum + pick(r), 0n);
        expect(total(after, (r) => r.posted)).toBe(total(rows, (r) => r.posted));
        expect(total(after, (r) => r.pending_debits)).toBe(total(after, (r) => r.pending_credits));
        for (const r of after) if (!r.is_external) expect(r.posted - r.pending_debits - r.held).toBeGreaterThanOrEqual(0n);
      }),
      { numRuns: 300 },
    );
  });

  it("a rollback to a checkpoint leaves the book exactly as it was (an atomic batch)", () => {
    fc.assert(
      fc.property(
        startRows,
        fc.array(command, { maxLength: 10 }),
        fc.array(command, { minLength: 1, maxLength: 20 }),
        (rows, first, second) => {
          const book = bookOf(rows);
          for (const c of first) book.apply(c);
          const balances = balancesOf(rowsAfter(book, rows));
          const effects = book.effects();
          const mark = book.checkpoint();
          for (const c of second) book.apply(c);
          book.rollback(mark);
          expect(balancesOf(rowsAfter(book, rows))).toEqual(balances);
          expect(book.effects()).toEqual(effects);
        },
      ),
      { numRuns: 200 },
    );
  });
});
