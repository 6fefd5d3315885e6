import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { errorCodeOf } from "@ledger/common";
import type { EntityRow } from "./entities.js";
import type { GroupRow } from "./groups.js";
import {
  Book,
  entityState,
  type BookEntity,
  type CaptureRow,
  type MoneyCommand,
  type Outcome,
  type ReservationRow,
} from "./money-rules.js";

// The pure money rules, with no database: a set of commands applied in one book must come to
// exactly what applying them one by one (each in a book of its own, as separate transactions
// would) comes to, money is conserved whatever mix of them is refused, and no balance of any
// entity ever leaves ±(2^53-1), the largest integer a JSON number carries exactly.

/** Number.MAX_SAFE_INTEGER: every balance stays within ±MAX (docs/architecture.md#money-rules-and-invariants). */
const MAX = 9_007_199_254_740_991n;

const ACCOUNT = "acct_1";
const PROGRAM = "prog_1";
const EXTERNAL = "ent_external";
const ORDINARY = ["ent_a", "ent_b", "ent_c", "ent_d"];
const OTHER_ACCOUNT = "ent_theirs";

/** An entity row as the book reads it, with the entity's other columns. */
type TestRow = EntityRow & BookEntity;

function row(
  id: string,
  balances: Partial<Pick<EntityRow, "posted" | "pending_debits" | "pending_credits" | "held" | "overdraft_limit" | "status">> = {},
): TestRow {
  return {
    id,
    version: "1",
    account_id: id === OTHER_ACCOUNT ? "acct_2" : ACCOUNT,
    program_id: PROGRAM,
    name: id,
    type: "wallet",
    status: "active",
    status_reason: "",
    currency_code: "USD",
    metadata: null,
    is_external: id === EXTERNAL,
    overdraft_limit: 0n,
    posted: 0n,
    pending_debits: 0n,
    pending_credits: 0n,
    held: 0n,
    created_at: new Date(0),
    updated_at: new Date(0),
    ...balances,
  };
}

/** What a book reads besides entities: stored groups, reservations and captures, by key. */
interface Stored {
  groups: Map<string, GroupRow>;
  reservations: Map<string, ReservationRow>;
  captures: Map<string, CaptureRow>;
}

const nothingStored = (): Stored => ({ groups: new Map(), reservations: new Map(), captures: new Map() });

/**
 * A book over `rows` and `stored`, as money-load.ts would build it after reading them. The book
 * changes the maps of `stored` in place as it applies commands (and puts them back on a refusal).
 */
function bookOf(rows: TestRow[], stored: Stored = nothingStored()): Book {
  return new Book({
    entities: new Map(rows.map((r) => [r.id, entityState(r)])),
    ...stored,
    externalIdFor: () => EXTERNAL,
    now: new Date(0),
  });
}

/** What is stored once `book`'s write commits, given what was stored before (its maps, changed in place). */
function storedAfter(book: Book, stored: Stored): Stored {
  const groups = new Map(stored.groups);
  for (const group of book.effects().newGroups) groups.set(group.id, group);
  return { groups, reservations: new Map(stored.reservations), captures: new Map(stored.captures) };
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
/** An outcome as both ways of applying must agree on it: refused with a code, or applied with or without a group. */
const summary = (o: Outcome) => (o.ok ? (o.group ? "ok with group" : "ok") : errorCodeOf(o.error).code);

/** Every balance of every row, available included, with where it is. */
function balanceList(rows: TestRow[]): Array<[string, string, bigint]> {
  return rows.flatMap((r) => [
    [r.id, "posted", r.posted],
    [r.id, "pending_debits", r.pending_debits],
    [r.id, "pending_credits", r.pending_credits],
    [r.id, "held", r.held],
    [r.id, "available", r.posted - r.pending_debits - r.held],
  ]);
}

const outOfRange = (rows: TestRow[]) => balanceList(rows).filter(([, , value]) => value > MAX || value < -MAX);

/** Reservations as stored, without the order they were made in. */
const reservationsOf = (stored: Stored) => [...stored.reservations.entries()].sort(([a], [b]) => a.localeCompare(b));

const base = { accountId: ACCOUNT, programId: PROGRAM, requestId: "req", traceparent: "" };
const entityId = fc.constantFrom(...ORDINARY, ORDINARY[0]!, EXTERNAL, OTHER_ACCOUNT, "ent_missing");
/** Mostly small amounts, and some large enough to take a balance near the bound past it. */
const amount = fc.oneof(fc.bigInt({ min: 1n, max: 500n }), fc.bigInt({ min: MAX - 2000n, max: MAX }));
const reservationId = fc.constantFrom("r1", "r2");
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
  // Holds, through the ledger's reservations.
  fc
    .record({ reservationId, entityId, amount })
    .map(({ reservationId, entityId, amount }): MoneyCommand => ({ kind: "reserve", ...base, reservationId, entityId, amount })),
  fc.record({ reservationId, captureId: fc.constantFrom("c1", "c2", "c3"), amount, to: entityId }).map(
    ({ reservationId, captureId, amount, to }): MoneyCommand => ({
      kind: "capture",
      ...base,
      reservationId,
      captureId,
      amount,
      destinationEntityId: to,
      description: "capture",
    }),
  ),
  reservationId.map((reservationId): MoneyCommand => ({ kind: "release", ...base, reservationId })),
);

/** A balance far from the bound, or just inside it. */
const anywhere = (max: bigint) => fc.oneof(fc.bigInt({ min: 0n, max: 1000n }), fc.bigInt({ min: max - 1000n, max }));

/** An overdraft limit: none (most entities), a small one, or one near the largest allowed. */
const overdraftLimit = fc.oneof(fc.constant(0n), fc.bigInt({ min: 1n, max: 1000n }), fc.bigInt({ min: MAX - 1000n, max: MAX }));

/**
 * Entities whose balances are all within the bound, some of them just inside it: ordinary entities
 * with posted and pending credits near 0 or near MAX, the external one with posted near 0 or near
 * -MAX (each deposit takes it down). They need not sum to zero: the rules never look at the sum.
 * Ordinary entities have overdraft limits, and some are already overdrawn, past their limit too
 * when it was lowered after they spent. Some are frozen, and some closed (with every balance at
 * zero, as closing requires).
 */
const startRows = fc
  .record({
    external: anywhere(MAX).map((n) => -n),
    ordinary: fc.tuple(
      ...ORDINARY.map(() =>
        fc.record({
          posted: fc.oneof(anywhere(MAX), fc.bigInt({ min: -1000n, max: -1n })),
          pendingCredits: anywhere(MAX),
          overdraftLimit,
          status: fc.constantFrom("active", "active", "frozen", "closed"),
        }),
      ),
    ),
  })
  .map(({ external, ordinary }) => [
    row(EXTERNAL, { posted: external }),
    ...ORDINARY.map((id, i) => {
      const { posted, pendingCredits, overdraftLimit, status } = ordinary[i]!;
      return status === "closed"
        ? row(id, { status, overdraft_limit: overdraftLimit })
        : row(id, { posted, pending_credits: pendingCredits, overdraft_limit: overdraftLimit, status });
    }),
    row(OTHER_ACCOUNT),
  ]);

describe("money rules (pure)", () => {
  it("a batch applied in one book equals its items applied one by one: same outcomes, same balances", () => {
    fc.assert(
      fc.property(startRows, fc.array(command, { minLength: 1, maxLength: 40 }), (rows, commands) => {
        const togetherStored = nothingStored();
        const together = bookOf(rows, togetherStored);
        const outcomes = commands.map((c) => summary(together.apply(c)));

        let current = rows;
        let stored = nothingStored();
        let groupsAlone = 0;
        const alone = commands.map((c) => {
          const book = bookOf(current, stored);
          const outcome = summary(book.apply(c));
          current = rowsAfter(book, current);
          stored = storedAfter(book, stored);
          groupsAlone += book.effects().newGroups.length;
          return outcome;
        });
        expect(outcomes).toEqual(alone);
        expect(balancesOf(rowsAfter(together, rows))).toEqual(balancesOf(current));
        expect(reservationsOf(togetherStored)).toEqual(reservationsOf(stored));
        // The same groups, each with its one event; nothing for a refused command.
        const effects = together.effects();
        expect(effects.newGroups).toHaveLength(groupsAlone);
        expect(effects.events).toHaveLength(groupsAlone);
      }),
      { numRuns: 300 },
    );
  });

  it("conserves money, keeps available at minus the overdraft limit or above, debits no frozen entity and touches no closed one", () => {
    fc.assert(
      fc.property(startRows, fc.array(command, { minLength: 1, maxLength: 40 }), (rows, commands) => {
        const book = bookOf(rows);
        for (const c of commands) {
          const before = rowsAfter(book, rows);
          book.apply(c);
          // An entity below its limit (the limit was lowered) may stay there, but go no lower. A
          // frozen entity's available never goes down; a closed entity never changes.
          rowsAfter(book, rows).forEach((r, i) => {
            if (r.is_external) return;
            const available = r.posted - r.pending_debits - r.held;
            const was = before[i]!.posted - before[i]!.pending_debits - before[i]!.held;
            if (available < was) expect(available).toBeGreaterThanOrEqual(-r.overdraft_limit);
            if (r.status === "frozen") expect(available).toBeGreaterThanOrEqual(was);
            if (r.status === "closed") expect(balancesOf([r])).toEqual(balancesOf([before[i]!]));
          });
        }
        const after = rowsAfter(book, rows);
        const total = (rs: TestRow[], pick: (r: TestRow) => bigint) => rs.reduce((sum, r) => sum + pick(r), 0n);
        expect(total(after, (r) => r.posted)).toBe(total(rows, (r) => r.posted));
        // Every pending debit has its pending credit (the start rows may hold pending credits of their own).
        expect(total(after, (r) => r.pending_debits) - total(rows, (r) => r.pending_debits)).toBe(
          total(after, (r) => r.pending_credits) - total(rows, (r) => r.pending_credits),
        );
      }),
      { numRuns: 300 },
    );
  });

  it("lets a debit take an entity down to exactly minus its overdraft limit, and not one unit more", () => {
    for (const spend of ["create", "reserve"] as const) {
      const book = bookOf([row("ent_a", { posted: 30n, overdraft_limit: 50n }), row("ent_b"), row(EXTERNAL)]);
      const debit = (amount: bigint, id: string): MoneyCommand =>
        spend === "create"
          ? {
              kind: "create",
              ...base,
              description: "t",
              metadata: null,
              status: "pending",
              legs: [
                { entityId: "ent_a", direction: "debit", amount },
                { entityId: "ent_b", direction: "credit", amount },
              ],
            }
          : { kind: "reserve", ...base, reservationId: id, entityId: "ent_a", amount };
      const refused = book.apply(debit(81n, "r1"));
      expect(refused.ok).toBe(false);
      expect(errorCodeOf((refused as { error: Error }).error as never)).toMatchObject({
        code: "insufficient_funds",
        details: { entity_id: "ent_a", available: 30, required: 81, overdraft_limit: 50 },
      });
      expect(summary(book.apply(debit(80n, "r2")))).not.toBe("insufficient_funds");
      const a = book.entity("ent_a")!;
      expect(a.posted - a.pendingDebits - a.held).toBe(-50n);
      expect(summary(book.apply(debit(1n, "r3")))).toBe("insufficient_funds");
    }
  });

  it("a capture repeated in the book that made it answers the group it made", () => {
    const book = bookOf([row("ent_a", { posted: 100n }), row("ent_b"), row(EXTERNAL)]);
    const capture: MoneyCommand = {
      kind: "capture",
      ...base,
      reservationId: "r1",
      captureId: "c1",
      amount: 60n,
      destinationEntityId: "ent_b",
      description: "capture",
    };
    expect(summary(book.apply({ kind: "reserve", ...base, reservationId: "r1", entityId: "ent_a", amount: 100n }))).toBe("ok");
    const first = book.apply(capture);
    const again = book.apply(capture);
    expect(first.ok && first.group).toBeTruthy();
    expect(again.ok && again.group?.id).toBe(first.ok && first.group!.id);
    expect(book.entity("ent_b")!.posted).toBe(60n);
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

  it("keeps every balance of every entity within ±(2^53-1): a command that would take one past it is refused and changes nothing", () => {
    fc.assert(
      fc.property(startRows, fc.array(command, { minLength: 1, maxLength: 40 }), (rows, commands) => {
        const book = bookOf(rows);
        for (const c of commands) {
          const before = balancesOf(rowsAfter(book, rows));
          const effects = book.effects();
          const outcome = book.apply(c);
          const after = rowsAfter(book, rows);
          expect(outOfRange(after)).toEqual([]);
          if (outcome.ok) continue;
          expect(balancesOf(after)).toEqual(before);
          expect(book.effects()).toEqual(effects);
          const { code, details } = errorCodeOf(outcome.error);
          if (code === "balance_out_of_range") {
            expect(details).toEqual({ entity_id: expect.any(String), balance: expect.any(String), limit: Number(MAX) });
          }
        }
      }),
      { numRuns: 300 },
    );
  });

  it("refuses with balance_out_of_range exactly the deposits and transfers that would take a balance past the bound", () => {
    // One command on entities anywhere within the bound, against a model of what it would do:
    // a deposit moves the external entity's posted (and available) down and the entity's up; a
    // posted transfer moves the payer's down and the payee's up; a pending one moves the payer's
    // pending debits and the payee's pending credits up. Only the external entity and the
    // receiving side can go past; the book checks the external entity, the first leg, first.
    const single = fc.oneof(
      fc.record({ kind: fc.constant("fund" as const), to: fc.constantFrom(...ORDINARY), amount }),
      fc.record({
        kind: fc.constantFrom("posted" as const, "pending" as const),
        from: fc.constantFrom(...ORDINARY),
        to: fc.constantFrom(...ORDINARY),
        amount,
      }),
    );
    fc.assert(
      fc.property(startRows, single, (rows, op) => {
        const byId = new Map(rows.map((r) => [r.id, r]));
        const book = bookOf(rows);
        let outcome: Outcome;
        let expected: string;
        if (op.kind === "fund") {
          outcome = book.apply({ kind: "fund", ...base, entityId: op.to, amount: op.amount, description: "fund" });
          const external = byId.get(EXTERNAL)!;
          if (byId.get(op.to)!.status === "closed") expected = "entity_closed";
          else if (external.posted - op.amount < -MAX) expected = `${EXTERNAL} posted`;
          else if (byId.get(op.to)!.posted + op.amount > MAX) expected = `${op.to} posted`;
          else expected = "ok";
        } else {
          outcome = book.apply({
            kind: "create",
            ...base,
            description: "t",
            metadata: null,
            status: op.kind,
            legs: [
              { entityId: op.from, direction: "debit", amount: op.amount },
              { entityId: op.to, direction: "credit", amount: op.amount },
            ],
          });
          const from = byId.get(op.from)!;
          const to = byId.get(op.to)!;
          const after = op.kind === "posted" ? to.posted + op.amount : to.pending_credits + op.amount;
          const overdrawn = from.posted - op.amount < -from.overdraft_limit;
          // The legs' statuses come first, the debit's then the credit's.
          if (from.status === "closed") expected = "entity_closed";
          else if (from.status === "frozen") expected = "entity_frozen";
          else if (to.status === "closed") expected = "entity_closed";
          else if (op.from === op.to) expected = op.kind === "posted" ? "ok" : overdrawn ? "insufficient_funds" : "ok";
          else if (overdrawn) expected = "insufficient_funds";
          else if (after > MAX) expected = `${op.to} ${op.kind === "posted" ? "posted" : "pending_credits"}`;
          else expected = "ok";
          // A pending transfer to itself adds the same amount to its pending credits.
          if (op.from === op.to && op.kind === "pending" && expected === "ok" && to.pending_credits + op.amount > MAX) {
            expected = `${op.to} pending_credits`;
          }
        }
        const got = outcome.ok
          ? "ok"
          : errorCodeOf(outcome.error).code === "balance_out_of_range"
            ? `${errorCodeOf(outcome.error).details!["entity_id"]} ${errorCodeOf(outcome.error).details!["balance"]}`
            : errorCodeOf(outcome.error).code;
        expect(got).toBe(expected);
      }),
      { numRuns: 1000 },
    );
  });
});

describe("posted legs (pure)", () => {
  // The balance history (docs/architecture.md#balance-history) computes each posted leg's balance
  // after it from the entity's posted balance after the write, less the write's later posted legs:
  // right only if a book's posted changes are exactly the legs it lists as posted.
  const action = fc.oneof(
    command.map((c) => ({ c })),
    fc.record({ settle: fc.nat(), to: fc.constantFrom("posted" as const, "canceled" as const, "failed" as const) }),
    fc.record({ reverse: fc.nat() }),
    fc.record({ dispute: fc.nat() }),
  );

  it("lists every leg it posts once, and an entity's posted balance moves by exactly its listed legs", () => {
    fc.assert(
      fc.property(startRows, fc.array(action, { minLength: 1, maxLength: 40 }), (rows, actions) => {
        const book = bookOf(rows);
        const groups: string[] = [];
        for (const a of actions) {
          let c: MoneyCommand | undefined;
          if ("c" in a) c = a.c;
          else if (groups.length === 0) continue;
          else if ("settle" in a) c = { kind: "settle", ...base, groupId: groups[a.settle % groups.length]!, to: a.to, reason: "" };
          else if ("reverse" in a) c = { kind: "reverse", ...base, groupId: groups[a.reverse % groups.length]!, description: "" };
          else c = { kind: "dispute", ...base, groupId: groups[a.dispute % groups.length]!, reason: "" };
          const outcome = book.apply(c);
          if (!outcome.ok) continue;
          for (const group of [outcome.group, outcome.reversal]) if (group && !groups.includes(group.id)) groups.push(group.id);
        }
        const { postedLegs } = book.effects();
        expect(new Set(postedLegs.map((l) => l.id)).size).toBe(postedLegs.length);
        rowsAfter(book, rows).forEach((r, i) => {
          const moved = postedLegs
            .filter((l) => l.entity_id === r.id)
            .reduce((sum, l) => sum + (l.direction === "credit" ? l.amount : -l.amount), 0n);
          expect(moved, r.id).toBe(r.posted - rows[i]!.posted);
        });
      }),
      { numRuns: 300 },
    );
  });
});
