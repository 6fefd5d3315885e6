import { isId, type Tx } from "@ledger/common";
import type { EntityRow } from "./entities.js";
import { loadGroups } from "./groups.js";
import { Book, entityState, inAccount, type CaptureRow, type EntityState, type MoneyCommand, type ReservationRow } from "./money-rules.js";

/** An external entity's balances as a batch's write left them. */
export type ExternalBalances = Pick<EntityRow, "id" | "posted" | "pending_debits" | "pending_credits">;

/**
 * External entities never change but for their balance, which the ledger only ever adjusts by
 * deltas; so their rows are cached for the life of the process, and never read or locked again.
 * The cached balances are only a hint for the int64 range check: each write of this process
 * refreshes them, other processes' writes do not.
 */
export class ExternalEntityCache {
  private readonly byProgramCurrency = new Map<string, string>();
  private readonly rows = new Map<string, EntityRow>();

  remember(row: EntityRow): void {
    this.rows.set(row.id, row);
    this.byProgramCurrency.set(`${row.program_id}:${row.currency_code}`, row.id);
  }
  refreshBalances(balances: ExternalBalances[]): void {
    for (const b of balances) {
      const row = this.rows.get(b.id);
      if (row)
        this.rows.set(
          b.id,
          Object.assign({}, row, { posted: b.posted, pending_debits: b.pending_debits, pending_credits: b.pending_credits }),
        );
    }
  }
  row(id: string): EntityRow | undefined {
    return this.rows.get(id);
  }
  idFor(programId: string, currencyCode: string): string | undefined {
    return this.byProgramCurrency.get(`${programId}:${currencyCode}`);
  }
}

/**
 * Reads and locks everything `commands` need, in one fixed order so that two transactions never
 * wait on each other in a cycle: groups by id, reservations by account and id, then ordinary
 * entities by id. External entities are never locked: they may go negative, so nothing is checked
 * against their balance, and their rows only receive deltas when the book is written. The answer
 * is a book over those rows, ready to apply the commands to.
 */
export async function loadBook(tx: Tx, commands: MoneyCommand[], externals: ExternalEntityCache, now = new Date()): Promise<Book> {
  const groupIds = commands.flatMap((c) => ("groupId" in c && isId("group", c.groupId) ? [c.groupId] : []));
  const groups = await loadGroups(tx, groupIds, true);

  const reserving = commands.filter((c) => "reservationId" in c);
  const reservations = new Map<string, ReservationRow>();
  const captures = new Map<string, CaptureRow>();
  if (reserving.length > 0) {
    for (const row of await tx<ReservationRow[]>`
      select r.*, e.currency_code from reservations r join entities e on e.id = r.entity_id
      where (r.account_id, r.id) in (select * from unnest(${reserving.map((c) => c.accountId)}::text[], ${reserving.map((c) => c.reservationId)}::text[]))
      order by r.account_id, r.id for update of r`) {
      reservations.set(inAccount(row.account_id, row.id), row);
    }
    const capturing = commands.filter((c) => c.kind === "capture");
    if (capturing.length > 0) {
      for (const row of await tx<CaptureRow[]>`
        select * from reservation_captures
        where (account_id, id) in (select * from unnest(${capturing.map((c) => c.accountId)}::text[], ${capturing.map((c) => c.captureId)}::text[]))`) {
        captures.set(inAccount(row.account_id, row.id), row);
      }
      // A repeated capture answers with the transfer it made the first time.
      for (const [id, group] of await loadGroups(
        tx,
        [...captures.values()].map((c) => c.group_id),
        false,
      ))
        groups.set(id, group);
    }
  }

  const entityIds = new Set<string>();
  for (const command of commands) {
    if (command.kind === "create") for (const leg of command.legs) entityIds.add(leg.entityId);
    if (command.kind === "fund" || command.kind === "defund" || command.kind === "reserve") entityIds.add(command.entityId);
    if (command.kind === "capture") entityIds.add(command.destinationEntityId);
  }
  for (const reservation of reservations.values()) entityIds.add(reservation.entity_id);
  for (const group of groups.values()) for (const leg of group.legs) entityIds.add(leg.entity_id);
  const ids = [...entityIds].filter((id) => isId("entity", id)).sort();
  const entities = new Map<string, EntityState>();
  const track = (row: EntityRow) => entities.set(row.id, entityState(row));
  if (ids.length > 0) {
    for (const row of await tx<EntityRow[]>`select * from entities where id = any(${ids}) and not is_external order by id for update`)
      track(row);
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

  return new Book({ entities, groups, reservations, captures, externalIdFor: (p, c) => externals.idFor(p, c), now });
}
