import type { JsonObject } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { invalidArgument, isId, newId, notFound, ruleViolation, type Tx } from "@ledger/common";
import type { Event } from "@ledger/proto/events/v1/events_pb.js";
import { availableOf, type EntityRow } from "./entities.js";
import { transactionEvent } from "./events.js";
import { loadGroups, type GroupRow, type LegDirection, type LegRow } from "./groups.js";

/** The largest amount JSON carries exactly (DESIGN.md section 3). */
export const MAX_AMOUNT = 9007199254740991n;

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
 * A validated request to change money. Handlers turn RPC requests into commands; `applyCommands`
 * is the one place that applies them. Everything a command needs from the database is loaded
 * and locked by `applyCommands`, so many commands can share one transaction.
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

interface CaptureRow {
  id: string;
  reservation_id: string;
  amount: bigint;
  group_id: string;
}

/** What a command did: the group it created or changed, or why it was refused. */
export type Outcome =
  | { ok: true; group?: GroupRow; reversal?: GroupRow; reservation?: ReservationRow }
  | { ok: false; error: ConnectError };

/** Checks an amount: a positive integer that JSON carries exactly. */
export function parseAmount(amount: bigint, field = "amount"): bigint {
  if (amount <= 0n) throw invalidArgument(`${field} must be a positive integer in minor units`, { [field]: Number(amount) });
  if (amount > MAX_AMOUNT) throw invalidArgument(`${field} must be at most ${MAX_AMOUNT}`);
  return amount;
}

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

/** Working state of one entity while a batch is applied. */
interface EntityState {
  row: EntityRow;
  /** For ordinary entities: the new absolute balances. For external ones: deltas only. */
  posted: bigint;
  pendingDebits: bigint;
  pendingCredits: bigint;
  held: bigint;
  changed: boolean;
}

/**
 * External entities never change but for their balance, which the ledger only ever adjusts by
 * deltas; so their rows are cached for the life of the process, and never read or locked again.
 */
export class ExternalEntityCache {
  private readonly byProgramCurrency = new Map<string, string>();
  private readonly rows = new Map<string, EntityRow>();

  remember(row: EntityRow): void {
    this.rows.set(row.id, row);
    this.byProgramCurrency.set(`${row.program_id}:${row.currency_code}`, row.id);
  }
  row(id: string): EntityRow | undefined {
    return this.rows.get(id);
  }
  idFor(programId: string, currencyCode: string): string | undefined {
    return this.byProgramCurrency.get(`${programId}:${currencyCode}`);
  }
}

/**
 * Applies `commands` in order inside `tx` and returns one outcome each. A refused command changes
 * nothing and does not disturb the others, so a batch of many callers' commands can commit together.
 * The batch's one write statement is sent but not awaited (`written`): the caller sends COMMIT
 * right behind it and awaits both, so the write costs no round trip of its own.
 *
 * Locks are always taken in one order: groups by id, reservations by id, then ordinary entities
 * by id. External
 * entities are never locked up front: they may go negative, so nothing has to be checked against
 * their balance, and their rows only receive deltas at the end, again in id order.
 */
export async function applyCommands(
  tx: Tx,
  commands: MoneyCommand[],
  externals: ExternalEntityCache,
  outboxRowsOf: (events: Event[]) => OutboxRow[],
): Promise<{ outcomes: Outcome[]; events: Event[]; written: Promise<unknown> }> {
  const now = new Date();

  const groupIds = commands.flatMap((c) => ("groupId" in c && isId("group", c.groupId) ? [c.groupId] : []));
  const groups = await loadGroups(tx, groupIds, true);

  const reservationIds = [...new Set(commands.flatMap((c) => ("reservationId" in c ? [c.reservationId] : [])))].sort();
  const reservations = new Map<string, ReservationRow>();
  const captures = new Map<string, CaptureRow>();
  if (reservationIds.length > 0) {
    for (const row of await tx<ReservationRow[]>`
      select r.*, e.currency_code from reservations r join entities e on e.id = r.entity_id
      where r.id = any(${reservationIds}) order by r.id for update of r`) {
      reservations.set(row.id, row);
    }
    const captureIds = commands.flatMap((c) => (c.kind === "capture" ? [c.captureId] : []));
    if (captureIds.length > 0) {
      for (const row of await tx<CaptureRow[]>`select * from reservation_captures where id = any(${captureIds})`) captures.set(row.id, row);
      // A repeated capture answers with the transfer it made the first time.
      for (const [id, group] of await loadGroups(tx, [...captures.values()].map((c) => c.group_id), false)) groups.set(id, group);
    }
  }

  const entityIds = new Set<string>();
  for (const command of commands) {
    if (command.kind === "create") command.legs.forEach((leg) => entityIds.add(leg.entityId));
    if (command.kind === "fund" || command.kind === "defund" || command.kind === "reserve") entityIds.add(command.entityId);
    if (command.kind === "capture") entityIds.add(command.destinationEntityId);
  }
  for (const reservation of reservations.values()) entityIds.add(reservation.entity_id);
  for (const group of groups.values()) group.legs.forEach((leg) => entityIds.add(leg.entity_id));
  const ids = [...entityIds].filter((id) => isId("entity", id)).sort();
  const entities = new Map<string, EntityState>();
  const track = (row: EntityRow) =>
    entities.set(row.id, row.is_external
      ? { row, posted: 0n, pendingDebits: 0n, pendingCredits: 0n, held: 0n, changed: false }
      : { row, posted: row.posted, pendingDebits: row.pending_debits, pendingCredits: row.pending_credits, held: row.held, changed: false });
  if (ids.length > 0) {
    for (const row of await tx<EntityRow[]>`select * from entities where id = any(${ids}) and not is_external order by id for update`) track(row);
    // What is not an ordinary entity is an external one (cached) or does not exist.
    const unknown = ids.filter((id) => !entities.has(id) && !externals.row(id));
    if (unknown.length > 0) {
      for (const row of await tx<EntityRow[]>`select * from entities where id = any(${unknown}) and is_external`) externals.remember(row);
    }
    for (const id of ids) {
      const external = externals.row(id);
      if (external && !entities.has(id)) track(external);
    }
  }

  // Fund and defund post against the external entity of the entity's program and currency.
  for (const command of commands) {
    if (command.kind !== "fund" && command.kind !== "defund") continue;
    const entity = entities.get(command.entityId)?.row;
    if (!entity) continue;
    let externalId = externals.idFor(entity.program_id, entity.currency_code);
    if (!externalId) {
      const [row] = await tx<EntityRow[]>`
        select * from entities where program_id = ${entity.program_id} and currency_code = ${entity.currency_code} and is_external`;
      if (row) {
        externals.remember(row);
        externalId = row.id;
      }
    }
    if (externalId && !entities.has(externalId)) track(externals.row(externalId)!);
  }

  const newGroups: GroupRow[] = [];
  const changedGroups = new Set<GroupRow>();
  const changedReservations = new Map<string, ReservationRow>();
  const newReservations = new Set<string>();
  const newCaptures: CaptureRow[] = [];
  const events: Event[] = [];
  const outcomes = commands.map((command): Outcome => {
    try {
      const staged = new Map<string, EntityState>();
      const stage = (id: string) => {
        let state = staged.get(id);
        if (!state) {
          state = { ...entities.get(id)! };
          staged.set(id, state);
        }
        return state;
      };
      const result = applyOne(command, { entities, groups, reservations, captures, stage, now, externals });
      // Only a command that passed every check touches the shared state.
      for (const [id, state] of staged) entities.set(id, { ...state, changed: true });
      for (const group of result.created) newGroups.push(group);
      for (const group of result.changed) {
        groups.set(group.id, group);
        if (!newGroups.includes(group)) changedGroups.add(group);
      }
      for (const reservation of result.reservations ?? []) {
        if (!reservations.has(reservation.id)) newReservations.add(reservation.id);
        reservations.set(reservation.id, reservation);
        changedReservations.set(reservation.id, reservation);
      }
      for (const capture of result.captures ?? []) {
        captures.set(capture.id, capture);
        newCaptures.push(capture);
      }
      events.push(...result.events);
      return {
        ok: true,
        ...(result.group ? { group: result.group } : {}),
        ...(result.reversal ? { reversal: result.reversal } : {}),
        ...(result.reservation ? { reservation: result.reservation } : {}),
      };
    } catch (err) {
      return { ok: false, error: ConnectError.from(err) };
    }
  });

  const written = persist(tx, {
    entities,
    newGroups,
    changedGroups: [...changedGroups],
    newReservations: [...changedReservations.values()].filter((r) => newReservations.has(r.id)),
    changedReservations: [...changedReservations.values()].filter((r) => !newReservations.has(r.id)),
    newCaptures,
    outbox: outboxRowsOf(events),
    now,
  });
  return { outcomes, events, written };
}

interface ApplyContext {
  entities: Map<string, EntityState>;
  groups: Map<string, GroupRow>;
  reservations: Map<string, ReservationRow>;
  captures: Map<string, CaptureRow>;
  stage: (entityId: string) => EntityState;
  now: Date;
  externals: ExternalEntityCache;
}

interface Applied {
  group?: GroupRow;
  reversal?: GroupRow;
  reservation?: ReservationRow;
  created: GroupRow[];
  changed: GroupRow[];
  reservations?: ReservationRow[];
  captures?: CaptureRow[];
  events: Event[];
}

function applyOne(command: MoneyCommand, ctx: ApplyContext): Applied {
  switch (command.kind) {
    case "create": {
      const group = newGroup(command, ctx, command.legs, command.status, command.description, command.metadata);
      return { group, created: [group], changed: [], events: [transactionEvent("transaction.created", group, command, ctx.now)] };
    }
    case "fund":
    case "defund": {
      const entity = entityOf(command, command.entityId, ctx);
      const externalId = ctx.externals.idFor(entity.program_id, entity.currency_code);
      if (!externalId) throw new ConnectError("program has no external entity", Code.Internal);
      const [from, to] = command.kind === "fund" ? [externalId, entity.id] : [entity.id, externalId];
      const legs: LegSpec[] = [
        { entityId: from, direction: "debit", amount: command.amount },
        { entityId: to, direction: "credit", amount: command.amount },
      ];
      const group = newGroup(command, ctx, legs, "posted", command.description, null);
      return { group, created: [group], changed: [], events: [transactionEvent("transaction.created", group, command, ctx.now)] };
    }
    case "settle": {
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
      const changed: GroupRow = { ...group, status: command.to, reason: command.reason || group.reason, updated_at: ctx.now };
      const type = command.to === "posted" ? "transaction.posted" : command.to === "canceled" ? "transaction.canceled" : "transaction.failed";
      return { group: changed, created: [], changed: [changed], events: [transactionEvent(type, changed, command, ctx.now)] };
    }
    case "reverse": {
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
      const reversed: GroupRow = { ...group, status: "reversed", reversed_by_group_id: reversal.id, updated_at: ctx.now };
      return {
        group: reversed,
        reversal,
        created: [reversal],
        changed: [reversed],
        events: [
          transactionEvent("transaction.created", reversal, command, ctx.now),
          transactionEvent("transaction.reversed", reversed, command, ctx.now),
        ],
      };
    }
    case "dispute": {
      const group = groupOf(command, command.groupId, ctx);
      if (group.status !== "posted" || group.disputed) {
        const why = group.disputed ? "is already disputed" : `is ${group.status}; only a posted group can be disputed`;
        throw ruleViolation("invalid_state", `transaction group ${group.id} ${why}`, { status: group.status, disputed: group.disputed });
      }
      const disputed: GroupRow = { ...group, disputed: true, reason: command.reason || group.reason, updated_at: ctx.now };
      return { group: disputed, created: [], changed: [disputed], events: [transactionEvent("transaction.disputed", disputed, command, ctx.now)] };
    }
    case "reserve": {
      const existing = ctx.reservations.get(command.reservationId);
      if (existing) {
        if (existing.account_id !== command.accountId || existing.program_id !== command.programId) throw notFound("entity", command.entityId);
        if (existing.entity_id !== command.entityId || existing.amount !== command.amount) {
          throw ruleViolation("idempotency_conflict", `reservation ${existing.id} already exists with another entity or amount`);
        }
        return { reservation: existing, created: [], changed: [], events: [] };
      }
      const entity = entityOf(command, command.entityId, ctx);
      if (entity.is_external) throw invalidArgument("funds cannot be held in a program's external entity");
      const before = ctx.entities.get(entity.id)!;
      const state = ctx.stage(entity.id);
      state.held += command.amount;
      if (state.posted - state.pendingDebits - state.held < 0n) {
        const available = before.posted - before.pendingDebits - before.held;
        throw ruleViolation("insufficient_funds", `entity ${entity.id} has ${available} available; ${command.amount} is required`, {
          entity_id: entity.id,
          available: Number(available),
          required: Number(command.amount),
        });
      }
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
    case "capture": {
      const reservation = reservationOf(command, command.reservationId, ctx);
      const earlier = ctx.captures.get(command.captureId);
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
      );
      const captured = reservation.captured_amount + command.amount;
      const updated: ReservationRow = {
        ...reservation,
        captured_amount: captured,
        status: captured === reservation.amount ? "released" : "active",
        updated_at: ctx.now,
      };
      return {
        group,
        reservation: updated,
        reservations: [updated],
        captures: [{ id: command.captureId, reservation_id: reservation.id, amount: command.amount, group_id: group.id }],
        created: [group],
        changed: [],
        events: [transactionEvent("transaction.created", group, command, ctx.now)],
      };
    }
    case "release": {
      const reservation = reservationOf(command, command.reservationId, ctx);
      if (reservation.status === "released") return { reservation, created: [], changed: [], events: [] };
      ctx.stage(reservation.entity_id).held -= reservation.amount - reservation.captured_amount;
      const released: ReservationRow = { ...reservation, status: "released", updated_at: ctx.now };
      return { reservation: released, reservations: [released], created: [], changed: [], events: [] };
    }
  }
}

function reservationOf(command: CommandBase, reservationId: string, ctx: ApplyContext): ReservationRow {
  const reservation = ctx.reservations.get(reservationId);
  if (!reservation || reservation.account_id !== command.accountId || reservation.program_id !== command.programId) {
    throw notFound("reservation", reservationId);
  }
  return reservation;
}

function entityOf(command: CommandBase, entityId: string, ctx: ApplyContext): EntityRow {
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
 * Stages the balance changes of a new group and builds it. Posted legs move posted balances;
 * pending debits set money aside (available drops) while pending credits wait (available stays).
 * Every ordinary entity must end with available >= 0.
 */
function newGroup(
  command: CommandBase,
  ctx: ApplyContext,
  legs: LegSpec[],
  status: "pending" | "posted",
  description: string,
  metadata: JsonObject | null,
  reverses?: string,
): GroupRow {
  const rows = legs.map((leg) => entityOf(command, leg.entityId, ctx));
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
    const before = ctx.entities.get(entityId)!;
    if (before.row.is_external || need <= 0n) continue;
    const after = ctx.stage(entityId);
    if (after.posted - after.pendingDebits - after.held < 0n) {
      const available = availableOf({ posted: before.posted, pending_debits: before.pendingDebits, held: before.held });
      throw ruleViolation("insufficient_funds", `entity ${entityId} has ${available} available; ${need} is required`, {
        entity_id: entityId,
        available: Number(available),
        required: Number(need),
      });
    }
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

/** An outbox row as `Outbox.rowsOf` makes it, written in the same statement as the effects. */
export interface OutboxRow {
  event_id: string;
  subject: string;
  payload: Uint8Array;
}

/**
 * Writes a batch's effects in one statement, sent at once and not awaited here, so a batch costs
 * at most one round trip to write however many commands it holds: ordinary balances (absolute), external balances (deltas), new groups
 * and legs, changed groups, reservations and captures, and the outbox rows of its events.
 * Foreign keys between the parts are checked at the end of the statement, when all are in.
 * The statement text never changes, so Postgres plans it once per connection.
 */
function persist(
  tx: Tx,
  batch: {
    entities: Map<string, EntityState>;
    newGroups: GroupRow[];
    changedGroups: GroupRow[];
    newReservations: ReservationRow[];
    changedReservations: ReservationRow[];
    newCaptures: CaptureRow[];
    outbox: OutboxRow[];
    now: Date;
  },
): Promise<unknown> {
  const changed = [...batch.entities.values()].filter((s) => s.changed).sort((a, b) => (a.row.id < b.row.id ? -1 : 1));
  const balances = (states: EntityState[]) =>
    json(states.map((s) => ({ id: s.row.id, posted: s.posted, pending_debits: s.pendingDebits, pending_credits: s.pendingCredits, held: s.held })));
  const ordinary = balances(changed.filter((s) => !s.row.is_external));
  const external = balances(changed.filter((s) => s.row.is_external));
  const groups = json(
    batch.newGroups.map((g) => ({
      id: g.id,
      account_id: g.account_id,
      program_id: g.program_id,
      status: g.status,
      description: g.description,
      metadata: g.metadata,
      currency_code: g.currency_code,
      amount: g.amount,
      reverses_group_id: g.reverses_group_id,
      created_at: g.created_at,
    })),
  );
  const legs = json(batch.newGroups.flatMap((g) => g.legs));
  const groupChanges = json(
    batch.changedGroups.map((g) => ({
      id: g.id,
      status: g.status,
      disputed: g.disputed,
      reason: g.reason,
      reversed_by_group_id: g.reversed_by_group_id,
      updated_at: g.updated_at,
    })),
  );
  const reservations = json(batch.newReservations);
  const reservationChanges = json(batch.changedReservations);
  const captures = json(batch.newCaptures);
  const outbox = json(batch.outbox.map((r) => ({ event_id: r.event_id, subject: r.subject, payload: Buffer.from(r.payload).toString("base64") })));
  return tx`
    with
    ordinary_balances as (
      update entities e
      set posted = v.posted, pending_debits = v.pending_debits, pending_credits = v.pending_credits, held = v.held, updated_at = ${batch.now}
      from json_to_recordset(${ordinary}::text::json) as v(id text, posted int8, pending_debits int8, pending_credits int8, held int8)
      where e.id = v.id),
    external_balances as (
      update entities e
      set posted = e.posted + v.posted, pending_debits = e.pending_debits + v.pending_debits,
          pending_credits = e.pending_credits + v.pending_credits, updated_at = ${batch.now}
      from json_to_recordset(${external}::text::json) as v(id text, posted int8, pending_debits int8, pending_credits int8, held int8)
      where e.id = v.id),
    new_groups as (
      insert into transaction_groups (id, account_id, program_id, status, description, metadata, currency_code, amount,
                                      reverses_group_id, created_at, updated_at)
      select id, account_id, program_id, status, description, metadata, currency_code, amount, reverses_group_id, created_at, created_at
      from json_to_recordset(${groups}::text::json) as r(id text, account_id text, program_id text, status text, description text,
        metadata jsonb, currency_code text, amount int8, reverses_group_id text, created_at timestamptz)),
    new_legs as (
      insert into legs (id, group_id, position, entity_id, direction, amount, created_at)
      select id, group_id, position, entity_id, direction, amount, created_at
      from json_to_recordset(${legs}::text::json) as r(id text, group_id text, position int, entity_id text, direction text,
        amount int8, created_at timestamptz)),
    changed_groups as (
      update transaction_groups g
      set status = v.status, disputed = v.disputed, reason = v.reason, reversed_by_group_id = v.reversed_by_group_id, updated_at = v.updated_at
      from json_to_recordset(${groupChanges}::text::json) as v(id text, status text, disputed boolean, reason text,
        reversed_by_group_id text, updated_at timestamptz)
      where g.id = v.id),
    new_reservations as (
      insert into reservations (id, account_id, program_id, entity_id, amount, captured_amount, status, created_at, updated_at)
      select id, account_id, program_id, entity_id, amount, captured_amount, status, created_at, updated_at
      from json_to_recordset(${reservations}::text::json) as r(id text, account_id text, program_id text, entity_id text,
        amount int8, captured_amount int8, status text, created_at timestamptz, updated_at timestamptz)),
    changed_reservations as (
      update reservations x
      set captured_amount = v.captured_amount, status = v.status, updated_at = v.updated_at
      from json_to_recordset(${reservationChanges}::text::json) as v(id text, captured_amount int8, status text, updated_at timestamptz)
      where x.id = v.id),
    new_captures as (
      insert into reservation_captures (id, reservation_id, amount, group_id)
      select id, reservation_id, amount, group_id
      from json_to_recordset(${captures}::text::json) as r(id text, reservation_id text, amount int8, group_id text)),
    new_events as (
      insert into outbox (event_id, subject, payload)
      select event_id, subject, decode(payload, 'base64')
      from json_to_recordset(${outbox}::text::json) as r(event_id text, subject text, payload text))
    select 1`.execute();
}

/** JSON text of rows for json_to_recordset: bigints as exact decimal strings, dates in ISO form. */
function json(rows: object[]): string {
  return JSON.stringify(rows, (_key, value: unknown) => (typeof value === "bigint" ? value.toString() : value));
}

/** Throws the error of a refused outcome; returns the successful one. */
export function expectOk(outcome: Outcome): Extract<Outcome, { ok: true }> {
  if (!outcome.ok) throw outcome.error;
  return outcome;
}

