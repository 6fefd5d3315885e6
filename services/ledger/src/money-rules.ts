// The money rules: pure functions over in-memory balances. Loading and locking the rows is
// money-load.ts, writing the result is money-persist.ts, and money.ts puts the three together.
import type { JsonObject } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { invalidArgument, MAX_AMOUNT, MAX_BALANCE, newId, notFound, parseAmount, ruleViolation } from "@ledger/common";
import type { BalanceAlertRow } from "./balance-alerts.js";
import { availableOf, type EntityRow } from "./entities.js";
import { encodeTransactionEvent, type EncodedEvent } from "./events.js";
import type { GroupRow, LegDirection, LegRow } from "./groups.js";

/** One leg as a command asks for it. */
export interface LegSpec {
  entityId: string;
  direction: LegDirection;
  amount: bigint;
}

interface CommandBase {
  accountId: string;
  programId: string;
  requestId: string;
  /** W3C traceparent of the call's span, stored on the events it causes. */
  traceparent: string;
}

/**
 * A validated request to change money. Handlers turn RPC requests into commands; a `Book` is the
 * one place that applies them. Everything a command needs from the database is loaded and locked
 * beforehand (money-load.ts), so many commands can share one transaction.
 */
export type MoneyCommand =
  | (CommandBase & { kind: "create"; description: string; metadata: JsonObject | null; status: "pending" | "posted"; legs: LegSpec[] })
  | (CommandBase & { kind: "fund" | "defund"; entityId: string; amount: bigint; description: string })
  | (CommandBase & { kind: "settle"; groupId: string; to: "posted" | "canceled" | "failed"; reason: string })
  | (CommandBase & { kind: "reverse"; groupId: string; description: string })
  | (CommandBase & { kind: "dispute"; groupId: string; reason: string })
  | (CommandBase & { kind: "reserve"; reservationId: string; entityId: string; amount: bigint })
  | (CommandBase & {
      kind: "capture";
      reservationId: string;
      captureId: string;
      amount: bigint;
      destinationEntityId: string;
      description: string;
    })
  | (CommandBase & { kind: "release"; reservationId: string });

/** A reservation as stored: money set aside in an entity for a hold. */
export interface ReservationRow {
  id: string;
  account_id: string;
  program_id: string;
  entity_id: string;
  amount: bigint;
  captured_amount: bigint;
  status: "active" | "released";
  /** The entity's currency; read with the row, not stored on it. */
  currency_code: string;
  created_at: Date;
  updated_at: Date;
}

export interface CaptureRow {
  id: string;
  account_id: string;
  reservation_id: string;
  amount: bigint;
  group_id: string;
}

/**
 * Map key of a caller-chosen id (reservation, capture): such ids are unique within an account
 * only, so two accounts' equal ids are two different things.
 */
export function inAccount(accountId: string, id: string): string {
  return `${accountId}\u0000${id}`;
}

/** What a command did: the group it created or changed, or why it was refused. */
export type Outcome =
  | { ok: true; group?: GroupRow; reversal?: GroupRow; reservation?: ReservationRow }
  | { ok: false; error: ConnectError };

/**
 * Checks the legs of a new group: at least two, each on a named entity with a direction and a
 * valid amount, debits equal to credits, and a total JSON can carry.
 */
export function parseLegs(legs: LegSpec[]): LegSpec[] {
  if (legs.length < 2) throw invalidArgument("a transaction needs at least two entries");
  if (legs.length > 100) throw invalidArgument("a transaction has at most 100 entries");
  let debits = 0n;
  let credits = 0n;
  legs.forEach((leg, i) => {
    if (leg.entityId === "") throw invalidArgument(`entries[${i}].entity_id is required`);
    parseAmount(leg.amount, `entries[${i}].amount`);
    if (leg.direction === "debit") debits += leg.amount;
    else credits += leg.amount;
  });
  if (debits !== credits) {
    throw ruleViolation("unbalanced_entries", "the sum of debits must equal the sum of credits", {
      debits: Number(debits),
      credits: Number(credits),
    });
  }
  if (debits > MAX_AMOUNT) throw invalidArgument(`the total of a transaction must be at most ${MAX_AMOUNT}`);
  return legs;
}

/**
 * What the rules read of an entity: who owns it, its currency, whether it is external, whether it
 * is active, frozen or closed, how far below zero it may go, and its balances, with `version`, the Postgres row version (xmin) those
 * are of. `alerts`: its balance alerts as of that version, when it has any (balance-alert-watch.ts).
 */
export type BookEntity = Pick<
  EntityRow,
  | "id"
  | "account_id"
  | "program_id"
  | "currency_code"
  | "is_external"
  | "status"
  | "overdraft_limit"
  | "posted"
  | "pending_debits"
  | "pending_credits"
  | "held"
> & { version: string; alerts?: readonly BalanceAlertRow[] };

/** Working state of one entity while commands are applied. */
export interface EntityState {
  row: BookEntity;
  /** For ordinary entities: the new absolute balances. For external ones: deltas only. */
  posted: bigint;
  pendingDebits: bigint;
  pendingCredits: bigint;
  held: bigint;
}

/** The starting state of a loaded entity: ordinary ones from their balances, external ones at zero deltas. */
export function entityState(row: BookEntity): EntityState {
  return row.is_external
    ? { row, posted: 0n, pendingDebits: 0n, pendingCredits: 0n, held: 0n }
    : { row, posted: row.posted, pendingDebits: row.pending_debits, pendingCredits: row.pending_credits, held: row.held };
}

/** What a set of applied commands leaves to write: the input of `persist` (money-persist.ts). */
export interface BookEffects {
  /** Entities whose balances changed, in id order. */
  changedEntities: EntityState[];
  newGroups: GroupRow[];
  changedGroups: GroupRow[];
  newReservations: ReservationRow[];
  changedReservations: ReservationRow[];
  newCaptures: CaptureRow[];
  /**
   * Every leg whose money this book moved into `posted`, in the order it did: the legs of groups
   * created posted (transfers, deposits, withdrawals, reversals, captures) and of pending groups it
   * posted. The book's posted changes are exactly these legs, which the balance history counts
   * (docs/architecture.md#balance-history).
   */
  postedLegs: LegRow[];
  events: EncodedEvent[];
}

/**
 * The money rules over in-memory state, with no I/O: the rows a set of commands needs, loaded and
 * locked beforehand, and the commands applied to them one after the other. Each `apply` is all or
 * nothing: a refused command leaves the book as it was, so its neighbours see no trace of it.
 * `checkpoint` and `rollback` widen that to a run of commands (an atomic batch).
 *
 * Every change goes through `change`, which logs how to undo it; a rollback replays the log
 * backwards. The book never reads the clock or the database: `now` is given, ids are new random ids.
 */
export class Book {
  private readonly undo: Array<() => void> = [];
  private readonly changedEntityIds = new Set<string>();
  private readonly newGroups: GroupRow[] = [];
  private readonly changedGroups = new Map<string, GroupRow>();
  private readonly newReservationKeys = new Set<string>();
  private readonly changedReservations = new Map<string, ReservationRow>();
  private readonly newCaptures: CaptureRow[] = [];
  private readonly postedLegs: LegRow[] = [];
  private readonly events: EncodedEvent[] = [];

  constructor(
    private readonly state: {
      entities: Map<string, EntityState>;
      groups: Map<string, GroupRow>;
      reservations: Map<string, ReservationRow>;
      captures: Map<string, CaptureRow>;
      /** The external entity of a program's currency, if it has one. */
      externalIdFor: (programId: string, currencyCode: string) => string | undefined;
      now: Date;
    },
  ) {}

  /** The current state of an entity, for tests and callers that report balances. */
  entity(id: string): EntityState | undefined {
    return this.state.entities.get(id);
  }

  /** The rows the book was opened over, as they were read (staging never changes a row). */
  rows(): BookEntity[] {
    return [...this.state.entities.values()].map((s) => s.row);
  }

  /** A point to roll back to. */
  checkpoint(): number {
    return this.undo.length;
  }

  /** Undoes every change made since `checkpoint`. */
  rollback(checkpoint: number): void {
    while (this.undo.length > checkpoint) this.undo.pop()!();
  }

  /** Applies one command, all or nothing, and answers its outcome. */
  apply(command: MoneyCommand): Outcome {
    const start = this.checkpoint();
    const { entities, groups, reservations, captures, now } = this.state;
    const before = new Map<string, EntityState>();
    const ctx: ApplyContext = {
      entities,
      groups,
      reservations,
      captures,
      now,
      externalIdFor: this.state.externalIdFor,
      before: (id) => before.get(id) ?? entities.get(id)!,
      stage: (id) => {
        if (!before.has(id)) {
          const original = entities.get(id)!;
          before.set(id, original);
          this.change(entities, id, { ...original });
          if (!this.changedEntityIds.has(id)) {
            this.changedEntityIds.add(id);
            this.undo.push(() => this.changedEntityIds.delete(id));
          }
        }
        return entities.get(id)!;
      },
    };
    try {
      const result = applyOne(command, ctx);
      for (const id of before.keys()) checkBalanceRange(entities.get(id)!);
      for (const group of result.created) {
        this.push(this.newGroups, group);
        if (group.status === "posted") for (const leg of group.legs) this.push(this.postedLegs, leg);
        // Readable like a stored group by later commands of the book: a capture repeated in the
        // same batch answers the group its first use made.
        this.change(groups, group.id, group);
      }
      for (const group of result.changed) {
        // Posting a pending group; a reversal or a dispute changes a group whose legs were posted already.
        if (group.status === "posted" && groups.get(group.id)?.status === "pending") {
          for (const leg of group.legs) this.push(this.postedLegs, leg);
        }
        this.change(groups, group.id, group);
        if (!this.newGroups.some((g) => g.id === group.id)) this.change(this.changedGroups, group.id, group);
      }
      for (const reservation of result.reservations ?? []) {
        const key = inAccount(reservation.account_id, reservation.id);
        if (!reservations.has(key) && !this.newReservationKeys.has(key)) {
          this.newReservationKeys.add(key);
          this.undo.push(() => this.newReservationKeys.delete(key));
        }
        this.change(reservations, key, reservation);
        this.change(this.changedReservations, key, reservation);
      }
      for (const capture of result.captures ?? []) {
        this.change(captures, inAccount(capture.account_id, capture.id), capture);
        this.push(this.newCaptures, capture);
      }
      for (const event of result.events) this.push(this.events, event);
      return {
        ok: true,
        ...(result.group ? { group: result.group } : {}),
        ...(result.reversal ? { reversal: result.reversal } : {}),
        ...(result.reservation ? { reservation: result.reservation } : {}),
      };
    } catch (err) {
      this.rollback(start);
      return { ok: false, error: ConnectError.from(err) };
    }
  }

  /** What the applied commands leave to write. */
  effects(): BookEffects {
    const changedEntities = [...this.changedEntityIds].sort().map((id) => this.state.entities.get(id)!);
    return {
      changedEntities,
      // As the book last left each one: a later command of the book may have changed it.
      newGroups: this.newGroups.map((g) => this.state.groups.get(g.id) ?? g),
      changedGroups: [...this.changedGroups.values()],
      newReservations: [...this.changedReservations].filter(([key]) => this.newReservationKeys.has(key)).map(([, r]) => r),
      changedReservations: [...this.changedReservations].filter(([key]) => !this.newReservationKeys.has(key)).map(([, r]) => r),
      newCaptures: [...this.newCaptures],
      postedLegs: [...this.postedLegs],
      events: [...this.events],
    };
  }

  private change<K, V>(map: Map<K, V>, key: K, value: V): void {
    const had = map.has(key);
    const old = map.get(key);
    map.set(key, value);
    this.undo.push(() => (had ? map.set(key, old as V) : map.delete(key)));
  }

  private push<T>(list: T[], item: T): void {
    list.push(item);
    this.undo.push(() => list.pop());
  }
}

/**
 * Refuses a command that would take any balance of an entity past ±MAX_BALANCE (2^53-1), before
 * anything is written: past it, a client reading the balance as a JSON number would get another
 * number. External entities are checked against their cached balance plus the batch's deltas; the
 * cache follows this process's own writes, so another process's writes can still surprise it, and
 * then the database's check constraint refuses the write and the same error comes back without the
 * entity's name (`clientSafeError` in packages/common/src/database-errors.ts).
 */
function checkBalanceRange(state: EntityState): void {
  const base = state.row.is_external ? state.row : { posted: 0n, pending_debits: 0n, pending_credits: 0n, held: 0n };
  const posted = base.posted + state.posted;
  const pendingDebits = base.pending_debits + state.pendingDebits;
  const held = base.held + state.held;
  const balances = {
    posted,
    pending_debits: pendingDebits,
    pending_credits: base.pending_credits + state.pendingCredits,
    held,
    available: posted - pendingDebits - held,
  };
  for (const [name, value] of Object.entries(balances)) {
    if (value < -MAX_BALANCE || value > MAX_BALANCE) {
      throw ruleViolation(
        "balance_out_of_range",
        `the ${name} balance of entity ${state.row.id} would be ${value}, past the bound of every balance, ±${MAX_BALANCE}`,
        { entity_id: state.row.id, balance: name, limit: Number(MAX_BALANCE) },
      );
    }
  }
}

interface ApplyContext {
  entities: Map<string, EntityState>;
  groups: Map<string, GroupRow>;
  reservations: Map<string, ReservationRow>;
  captures: Map<string, CaptureRow>;
  /** The entity's state as it was when this command started. */
  before: (entityId: string) => EntityState;
  /** The entity's state, to change; changes are undone if the command is refused. */
  stage: (entityId: string) => EntityState;
  now: Date;
  externalIdFor: (programId: string, currencyCode: string) => string | undefined;
}

/** What one command did, before the book records it. */
interface Effects {
  group?: GroupRow;
  reversal?: GroupRow;
  reservation?: ReservationRow;
  created: GroupRow[];
  changed: GroupRow[];
  reservations?: ReservationRow[];
  captures?: CaptureRow[];
  events: EncodedEvent[];
}

/** What one command does to the staged balances and rows: each kind's rules are in its own function below. */
function applyOne(command: MoneyCommand, ctx: ApplyContext): Effects {
  switch (command.kind) {
    case "create":
      return applyCreate(command, ctx);
    case "fund":
    case "defund":
      return applyFundOrDefund(command, ctx);
    case "settle":
      return applySettle(command, ctx);
    case "reverse":
      return applyReverse(command, ctx);
    case "dispute":
      return applyDispute(command, ctx);
    case "reserve":
      return applyReserve(command, ctx);
    case "capture":
      return applyCapture(command, ctx);
    case "release":
      return applyRelease(command, ctx);
  }
}

function applyCreate(command: Extract<MoneyCommand, { kind: "create" }>, ctx: ApplyContext): Effects {
  const group = newGroup(command, ctx, command.legs, command.status, command.description, command.metadata);
  return { group, created: [group], changed: [], events: [encodeTransactionEvent("transaction.created", group, command, ctx.now)] };
}

function applyFundOrDefund(command: Extract<MoneyCommand, { kind: "fund" | "defund" }>, ctx: ApplyContext): Effects {
  const entity = entityOf(command, command.entityId, ctx);
  const externalId = ctx.externalIdFor(entity.program_id, entity.currency_code);
  if (!externalId) throw new ConnectError("program has no external entity", Code.Internal);
  const [from, to] = command.kind === "fund" ? [externalId, entity.id] : [entity.id, externalId];
  const legs: LegSpec[] = [
    { entityId: from, direction: "debit", amount: command.amount },
    { entityId: to, direction: "credit", amount: command.amount },
  ];
  const group = newGroup(command, ctx, legs, "posted", command.description, null);
  return { group, created: [group], changed: [], events: [encodeTransactionEvent("transaction.created", group, command, ctx.now)] };
}

function applySettle(command: Extract<MoneyCommand, { kind: "settle" }>, ctx: ApplyContext): Effects {
  const group = groupOf(command, command.groupId, ctx);
  if (group.status !== "pending") {
    throw ruleViolation("invalid_state", `transaction group ${group.id} is ${group.status}; only a pending group can be ${command.to}`, {
      status: group.status,
    });
  }
  for (const leg of group.legs) {
    const state = ctx.stage(leg.entity_id);
    if (leg.direction === "debit") {
      state.pendingDebits -= leg.amount;
      if (command.to === "posted") state.posted -= leg.amount;
    } else {
      state.pendingCredits -= leg.amount;
      if (command.to === "posted") state.posted += leg.amount;
    }
  }
  const changed: GroupRow = Object.assign({}, group, {
    status: command.to,
    reason: command.reason || group.reason,
    updated_at: ctx.now,
  });
  const type = command.to === "posted" ? "transaction.posted" : command.to === "canceled" ? "transaction.canceled" : "transaction.failed";
  return { group: changed, created: [], changed: [changed], events: [encodeTransactionEvent(type, changed, command, ctx.now)] };
}

function applyReverse(command: Extract<MoneyCommand, { kind: "reverse" }>, ctx: ApplyContext): Effects {
  const group = groupOf(command, command.groupId, ctx);
  if (group.status !== "posted") {
    throw ruleViolation("invalid_state", `transaction group ${group.id} is ${group.status}; only a posted group can be reversed`, {
      status: group.status,
    });
  }
  const flipped: LegSpec[] = group.legs.map((leg) => ({
    entityId: leg.entity_id,
    direction: leg.direction === "debit" ? "credit" : "debit",
    amount: leg.amount,
  }));
  const description = command.description || `Reversal of ${group.id}`;
  const reversal = newGroup(command, ctx, flipped, "posted", description, group.metadata, group.id);
  const reversed: GroupRow = Object.assign({}, group, {
    status: "reversed" as const,
    reversed_by_group_id: reversal.id,
    updated_at: ctx.now,
  });
  return {
    group: reversed,
    reversal,
    created: [reversal],
    changed: [reversed],
    events: [
      encodeTransactionEvent("transaction.created", reversal, command, ctx.now),
      encodeTransactionEvent("transaction.reversed", reversed, command, ctx.now),
    ],
  };
}

function applyDispute(command: Extract<MoneyCommand, { kind: "dispute" }>, ctx: ApplyContext): Effects {
  const group = groupOf(command, command.groupId, ctx);
  if (group.status !== "posted" || group.disputed) {
    const why = group.disputed ? "is already disputed" : `is ${group.status}; only a posted group can be disputed`;
    throw ruleViolation("invalid_state", `transaction group ${group.id} ${why}`, { status: group.status, disputed: group.disputed });
  }
  const disputed: GroupRow = Object.assign({}, group, { disputed: true, reason: command.reason || group.reason, updated_at: ctx.now });
  return {
    group: disputed,
    created: [],
    changed: [disputed],
    events: [encodeTransactionEvent("transaction.disputed", disputed, command, ctx.now)],
  };
}

function applyReserve(command: Extract<MoneyCommand, { kind: "reserve" }>, ctx: ApplyContext): Effects {
  const existing = ctx.reservations.get(inAccount(command.accountId, command.reservationId));
  if (existing) {
    if (existing.program_id !== command.programId) throw notFound("entity", command.entityId);
    if (existing.entity_id !== command.entityId || existing.amount !== command.amount) {
      throw ruleViolation("idempotency_conflict", `reservation ${existing.id} already exists with another entity or amount`);
    }
    return { reservation: existing, created: [], changed: [], events: [] };
  }
  const entity = entityOf(command, command.entityId, ctx);
  if (entity.is_external) throw invalidArgument("funds cannot be held in a program's external entity");
  checkStatus(entity, "debit");
  const before = ctx.before(entity.id);
  const state = ctx.stage(entity.id);
  state.held += command.amount;
  checkOverdraft(before, state, command.amount);
  const reservation: ReservationRow = {
    id: command.reservationId,
    account_id: command.accountId,
    program_id: command.programId,
    entity_id: entity.id,
    amount: command.amount,
    captured_amount: 0n,
    status: "active",
    currency_code: entity.currency_code,
    created_at: ctx.now,
    updated_at: ctx.now,
  };
  return { reservation, reservations: [reservation], created: [], changed: [], events: [] };
}

function applyCapture(command: Extract<MoneyCommand, { kind: "capture" }>, ctx: ApplyContext): Effects {
  const reservation = reservationOf(command, command.reservationId, ctx);
  const earlier = ctx.captures.get(inAccount(command.accountId, command.captureId));
  if (earlier) {
    if (earlier.reservation_id !== reservation.id || earlier.amount !== command.amount) {
      throw ruleViolation("idempotency_conflict", `capture ${earlier.id} already exists with another amount`);
    }
    return { reservation, group: ctx.groups.get(earlier.group_id)!, created: [], changed: [], events: [] };
  }
  if (reservation.status !== "active") throw ruleViolation("hold_not_active", `reservation ${reservation.id} is ${reservation.status}`);
  const remaining = reservation.amount - reservation.captured_amount;
  if (command.amount > remaining) {
    throw ruleViolation("capture_exceeds_hold", `the capture of ${command.amount} exceeds the ${remaining} remaining`, {
      remaining: Number(remaining),
      requested: Number(command.amount),
    });
  }
  if (command.destinationEntityId === reservation.entity_id) {
    throw invalidArgument("destination_entity_id must differ from the entity the funds are held in");
  }
  // The reserved money leaves `held` and `posted` together, so available does not move.
  ctx.stage(reservation.entity_id).held -= command.amount;
  const group = newGroup(
    command,
    ctx,
    [
      { entityId: reservation.entity_id, direction: "debit", amount: command.amount },
      { entityId: command.destinationEntityId, direction: "credit", amount: command.amount },
    ],
    "posted",
    command.description,
    null,
    undefined,
    reservation.entity_id,
  );
  const captured = reservation.captured_amount + command.amount;
  const updated: ReservationRow = Object.assign({}, reservation, {
    captured_amount: captured,
    status: captured === reservation.amount ? "released" : "active",
    updated_at: ctx.now,
  });
  return {
    group,
    reservation: updated,
    reservations: [updated],
    captures: [
      {
        id: command.captureId,
        account_id: command.accountId,
        reservation_id: reservation.id,
        amount: command.amount,
        group_id: group.id,
      },
    ],
    created: [group],
    changed: [],
    events: [encodeTransactionEvent("transaction.created", group, command, ctx.now)],
  };
}

function applyRelease(command: Extract<MoneyCommand, { kind: "release" }>, ctx: ApplyContext): Effects {
  const reservation = reservationOf(command, command.reservationId, ctx);
  if (reservation.status === "released") return { reservation, created: [], changed: [], events: [] };
  ctx.stage(reservation.entity_id).held -= reservation.amount - reservation.captured_amount;
  const released: ReservationRow = Object.assign({}, reservation, { status: "released" as const, updated_at: ctx.now });
  return { reservation: released, reservations: [released], created: [], changed: [], events: [] };
}

function reservationOf(command: CommandBase, reservationId: string, ctx: ApplyContext): ReservationRow {
  const reservation = ctx.reservations.get(inAccount(command.accountId, reservationId));
  if (!reservation || reservation.program_id !== command.programId) {
    throw notFound("reservation", reservationId);
  }
  return reservation;
}

function entityOf(command: CommandBase, entityId: string, ctx: ApplyContext): BookEntity {
  const row = ctx.entities.get(entityId)?.row;
  if (!row || row.account_id !== command.accountId || row.program_id !== command.programId) throw notFound("entity", entityId);
  return row;
}

function groupOf(command: CommandBase, groupId: string, ctx: ApplyContext): GroupRow {
  const group = ctx.groups.get(groupId);
  if (!group || group.account_id !== command.accountId || group.program_id !== command.programId) {
    throw notFound("transaction group", groupId);
  }
  return group;
}

/**
 * Stages the balance changes of a new group and builds it. `capturedFrom` is the entity whose
 * hold a capture takes the money from. Posted legs move posted balances;
 * pending debits set money aside (available drops) while pending credits wait (available stays).
 * Every ordinary entity it spends from must end with available >= -overdraft_limit.
 */
function newGroup(
  command: CommandBase,
  ctx: ApplyContext,
  legs: LegSpec[],
  status: "pending" | "posted",
  description: string,
  metadata: JsonObject | null,
  reverses?: string,
  capturedFrom?: string,
): GroupRow {
  const rows = legs.map((leg) => entityOf(command, leg.entityId, ctx));
  // A capture's debit settles a hold made before: a frozen entity takes it.
  legs.forEach((leg, i) => {
    checkStatus(rows[i]!, leg.entityId === capturedFrom ? "credit" : leg.direction);
  });
  const currencies = [...new Set(rows.map((row) => row.currency_code))];
  if (currencies.length > 1) {
    throw ruleViolation("currency_mismatch", `all entries of a transaction must share one currency; got ${currencies.join(", ")}`, {
      currencies,
    });
  }
  const required = new Map<string, bigint>();
  for (const leg of legs) {
    const state = ctx.stage(leg.entityId);
    if (status === "posted") state.posted += leg.direction === "credit" ? leg.amount : -leg.amount;
    else if (leg.direction === "debit") state.pendingDebits += leg.amount;
    else state.pendingCredits += leg.amount;
    const spent = leg.direction === "debit" ? leg.amount : status === "posted" ? -leg.amount : 0n;
    required.set(leg.entityId, (required.get(leg.entityId) ?? 0n) + spent);
  }
  for (const [entityId, need] of required) {
    const before = ctx.before(entityId);
    if (before.row.is_external || need <= 0n) continue;
    checkOverdraft(before, ctx.stage(entityId), need);
  }
  const id = newId("group");
  const legRows: LegRow[] = legs.map((leg, position) => ({
    id: newId("leg"),
    group_id: id,
    position,
    entity_id: leg.entityId,
    direction: leg.direction,
    amount: leg.amount,
    created_at: ctx.now,
  }));
  const amount = legs.filter((leg) => leg.direction === "debit").reduce((sum, leg) => sum + leg.amount, 0n);
  return {
    id,
    account_id: command.accountId,
    program_id: command.programId,
    status,
    description,
    metadata,
    currency_code: currencies[0]!,
    amount,
    disputed: false,
    reason: "",
    reverses_group_id: reverses ?? null,
    reversed_by_group_id: null,
    created_at: ctx.now,
    updated_at: ctx.now,
    legs: legRows,
  };
}

/**
 * What an entity's status lets a new leg or hold do: a closed entity takes nothing, a frozen one
 * takes credits only. Settling what was already in flight goes through other paths and is not
 * checked here (docs/architecture.md#money-rules-and-invariants).
 */
function checkStatus(row: BookEntity, direction: LegDirection): void {
  if (row.status === "closed") {
    throw ruleViolation("entity_closed", `entity ${row.id} is closed`, { entity_id: row.id });
  }
  if (row.status === "frozen" && direction === "debit") {
    throw ruleViolation("entity_frozen", `entity ${row.id} is frozen; it takes no new debits`, { entity_id: row.id });
  }
}

/**
 * The no-overdraft rule: what spends `need` from an ordinary entity must leave its available at
 * minus its overdraft limit or above. An entity already below that (its limit was lowered) keeps
 * its balance but can spend nothing more.
 */
function checkOverdraft(before: EntityState, after: EntityState, need: bigint): void {
  const limit = before.row.overdraft_limit;
  if (after.posted - after.pendingDebits - after.held >= -limit) return;
  const id = before.row.id;
  const available = availableOf({ posted: before.posted, pending_debits: before.pendingDebits, held: before.held });
  const beyond = limit > 0n ? ` (overdraft limit ${limit})` : "";
  throw ruleViolation("insufficient_funds", `entity ${id} has ${available} available${beyond}; ${need} is required`, {
    entity_id: id,
    available: Number(available),
    required: Number(need),
    overdraft_limit: Number(limit),
  });
}

/** Throws the error of a refused outcome; returns the successful one. */
export function expectOk(outcome: Outcome): Extract<Outcome, { ok: true }> {
  if (!outcome.ok) throw outcome.error;
  return outcome;
}
