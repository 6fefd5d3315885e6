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
  | (CommandBase & { kind: "dispute"; groupId: string; reason: string });

/** What a command did: the group it created or changed, or why it was refused. */
export type Outcome =
  | { ok: true; group: GroupRow; reversal?: GroupRow }
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
  changed: boolean;
}

/** Caches the external entity of each program and currency; they never change once created. */
export type ExternalEntityCache = Map<string, string>;

/**
 * Applies `commands` in order inside `tx` and returns one outcome each. A refused command changes
 * nothing and does not disturb the others, so a batch of many callers' commands can commit together.
 *
 * Locks are always taken in one order: groups by id, then ordinary entities by id. External
 * entities are never locked up front: they may go negative, so nothing has to be checked against
 * their balance, and their rows only receive deltas at the end, again in id order.
 */
export async function applyCommands(
  tx: Tx,
  commands: MoneyCommand[],
  externals: ExternalEntityCache,
): Promise<{ outcomes: Outcome[]; events: Event[] }> {
  const now = new Date();

  const groupIds = commands.flatMap((c) => ("groupId" in c && isId("group", c.groupId) ? [c.groupId] : []));
  const groups = await loadGroups(tx, groupIds, true);

  const entityIds = new Set<string>();
  for (const command of commands) {
    if (command.kind === "create") command.legs.forEach((leg) => entityIds.add(leg.entityId));
    if (command.kind === "fund" || command.kind === "defund") entityIds.add(command.entityId);
  }
  for (const group of groups.values()) group.legs.forEach((leg) => entityIds.add(leg.entity_id));
  const ids = [...entityIds].filter((id) => isId("entity", id)).sort();
  const entities = new Map<string, EntityState>();
  const track = (row: EntityRow) =>
    entities.set(row.id, row.is_external
      ? { row, posted: 0n, pendingDebits: 0n, pendingCredits: 0n, changed: false }
      : { row, posted: row.posted, pendingDebits: row.pending_debits, pendingCredits: row.pending_credits, changed: false });
  if (ids.length > 0) {
    for (const row of await tx<EntityRow[]>`select * from entities where id = any(${ids}) and not is_external order by id for update`) track(row);
    for (const row of await tx<EntityRow[]>`select * from entities where id = any(${ids}) and is_external`) track(row);
  }

  // Fund and defund post against the external entity of the entity's program and currency.
  for (const command of commands) {
    if (command.kind !== "fund" && command.kind !== "defund") continue;
    const entity = entities.get(command.entityId)?.row;
    if (!entity) continue;
    const key = `${entity.program_id}:${entity.currency_code}`;
    let externalId = externals.get(key);
    if (!externalId || !entities.has(externalId)) {
      const [row] = await tx<EntityRow[]>`
        select * from entities where program_id = ${entity.program_id} and currency_code = ${entity.currency_code} and is_external`;
      if (row) {
        externalId = row.id;
        externals.set(key, row.id);
        if (!entities.has(row.id)) track(row);
      }
    }
  }

  const newGroups: GroupRow[] = [];
  const changedGroups = new Set<GroupRow>();
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
      const result = applyOne(command, { entities, groups, stage, now, externals });
      // Only a command that passed every check touches the shared state.
      for (const [id, state] of staged) entities.set(id, { ...state, changed: true });
      for (const group of result.created) newGroups.push(group);
      for (const group of result.changed) {
        groups.set(group.id, group);
        if (!newGroups.includes(group)) changedGroups.add(group);
      }
      events.push(...result.events);
      return { ok: true, group: result.group, ...(result.reversal ? { reversal: result.reversal } : {}) };
    } catch (err) {
      return { ok: false, error: ConnectError.from(err) };
    }
  });

  await persist(tx, { entities, newGroups, changedGroups: [...changedGroups], now });
  return { outcomes, events };
}

interface ApplyContext {
  entities: Map<string, EntityState>;
  groups: Map<string, GroupRow>;
  stage: (entityId: string) => EntityState;
  now: Date;
  externals: ExternalEntityCache;
}

interface Applied {
  group: GroupRow;
  reversal?: GroupRow;
  created: GroupRow[];
  changed: GroupRow[];
  events: Event[];
}

function applyOne(command: MoneyCommand, ctx: ApplyContext): Applied {
  switch (command.kind) {
    case "create": {
      const group = newGroup(command, ctx, command.legs, command.status, command.description, command.metadata);
      return { group, created: [group], changed: [], events: [transactionEvent("transaction.created", group, command.requestId, ctx.now)] };
    }
    case "fund":
    case "defund": {
      const entity = entityOf(command, command.entityId, ctx);
      const externalId = ctx.externals.get(`${entity.program_id}:${entity.currency_code}`);
      if (!externalId) throw new ConnectError("program has no external entity", Code.Internal);
      const [from, to] = command.kind === "fund" ? [externalId, entity.id] : [entity.id, externalId];
      const legs: LegSpec[] = [
        { entityId: from, direction: "debit", amount: command.amount },
        { entityId: to, direction: "credit", amount: command.amount },
      ];
      const group = newGroup(command, ctx, legs, "posted", command.description, null);
      return { group, created: [group], changed: [], events: [transactionEvent("transaction.created", group, command.requestId, ctx.now)] };
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
      return { group: changed, created: [], changed: [changed], events: [transactionEvent(type, changed, command.requestId, ctx.now)] };
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
          transactionEvent("transaction.created", reversal, command.requestId, ctx.now),
          transactionEvent("transaction.reversed", reversed, command.requestId, ctx.now),
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
      return { group: disputed, created: [], changed: [disputed], events: [transactionEvent("transaction.disputed", disputed, command.requestId, ctx.now)] };
    }
  }
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
    if (after.posted - after.pendingDebits - before.row.held < 0n) {
      const available = availableOf({ posted: before.posted, pending_debits: before.pendingDebits, held: before.row.held });
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

/** Writes a batch's effects: balances, new groups and legs, then changed groups. */
async function persist(
  tx: Tx,
  batch: { entities: Map<string, EntityState>; newGroups: GroupRow[]; changedGroups: GroupRow[]; now: Date },
): Promise<void> {
  const changed = [...batch.entities.values()].filter((s) => s.changed).sort((a, b) => (a.row.id < b.row.id ? -1 : 1));
  const ordinary = changed.filter((s) => !s.row.is_external);
  if (ordinary.length > 0) {
    await tx`
      update entities e set posted = v.posted, pending_debits = v.pending_debits, pending_credits = v.pending_credits,
                            updated_at = ${batch.now}
      from (select unnest(${ordinary.map((s) => s.row.id)}::text[]) as id,
                   unnest(${ordinary.map((s) => s.posted.toString())}::int8[]) as posted,
                   unnest(${ordinary.map((s) => s.pendingDebits.toString())}::int8[]) as pending_debits,
                   unnest(${ordinary.map((s) => s.pendingCredits.toString())}::int8[]) as pending_credits) v
      where e.id = v.id`;
  }
  for (const state of changed.filter((s) => s.row.is_external)) {
    await tx`
      update entities set posted = posted + ${state.posted}, pending_debits = pending_debits + ${state.pendingDebits},
                          pending_credits = pending_credits + ${state.pendingCredits}, updated_at = ${batch.now}
      where id = ${state.row.id}`;
  }
  if (batch.newGroups.length > 0) {
    const groupRows = batch.newGroups.map((g) => ({
      id: g.id,
      account_id: g.account_id,
      program_id: g.program_id,
      status: g.status,
      description: g.description,
      metadata: g.metadata === null ? null : tx.json(g.metadata),
      currency_code: g.currency_code,
      amount: g.amount,
      reverses_group_id: g.reverses_group_id,
      created_at: g.created_at,
      updated_at: g.updated_at,
    }));
    await tx`insert into transaction_groups ${tx(groupRows)}`;
    const legRows = batch.newGroups.flatMap((g) => g.legs);
    await tx`insert into legs ${tx(legRows, "id", "group_id", "position", "entity_id", "direction", "amount", "created_at")}`;
  }
  for (const group of batch.changedGroups) {
    await tx`
      update transaction_groups set status = ${group.status}, disputed = ${group.disputed}, reason = ${group.reason},
                                    reversed_by_group_id = ${group.reversed_by_group_id}, updated_at = ${group.updated_at}
      where id = ${group.id}`;
  }
}

/** Throws the error of a refused outcome; returns the successful one. */
export function expectOk(outcome: Outcome): Extract<Outcome, { ok: true }> {
  if (!outcome.ok) throw outcome.error;
  return outcome;
}

