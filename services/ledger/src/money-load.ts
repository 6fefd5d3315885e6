import { isId, type Tx } from "@ledger/common";
import type { BalanceAlertRow } from "./balance-alerts.js";
import type { EntityRow } from "./entities.js";
import { AccountRefs } from "./account-refs.js";
import { loadGroups } from "./groups.js";
import {
  Book,
  entityState,
  inAccount,
  type BookEntity,
  type CaptureRow,
  type EntityState,
  type MoneyCommand,
  type ReservationRow,
} from "./money-rules.js";

/** An external entity's balances as a batch's write left them. */
export type ExternalBalances = Pick<EntityRow, "id" | "posted" | "pending_debits" | "pending_credits">;

/** The columns of an entity row the rules read (`BookEntity`), with the row's version. */
export const BOOK_ENTITY_COLUMNS =
  "id, account_id, program_id, currency_code, is_external, status, overdraft_limit, posted, pending_debits, pending_credits, held, xmin::text as version";

/**
 * The entity rows this process read or wrote last, so that a batch of transfers between entities
 * it knows can skip the locked read (docs/architecture.md#cached-balances).
 *
 * Ordinary entities: each cached row is a version of the row that exists or existed in Postgres,
 * with the xmin of that version and the balance alerts the entity had at that version (every
 * change of its alerts makes a new version: balance-alerts.ts). A write that rests on cached rows
 * succeeds only if every one of them still has that version when the write locks it
 * (money-persist.ts), so a stale entry, one written by another process or by a transaction that
 * rolled back, costs a retry and never a wrong balance or a missed alert.
 *
 * External entities never change but for their balance, which the ledger only ever adjusts by
 * deltas; so their rows are cached for the life of the process and never locked. Their cached
 * balances are only a hint for the balance range check, on which the database's check constraint
 * has the last word: each write of this process refreshes them, other processes' writes do not.
 */
export class EntityCache {
  private readonly ordinary = new Map<string, BookEntity>();
  private readonly externals = new Map<string, BookEntity>();
  private readonly externalByProgramCurrency = new Map<string, string>();
  /** Ordinary entities a transaction of this process is writing, with how many are. */
  private readonly writing = new Map<string, number>();
  /** Batches waiting for writes of this process to end, oldest first (`whenWritten`). */
  private readonly waiters: Array<{ ids: string[]; resolve: () => void }> = [];

  /** `capacity`: how many ordinary entities it keeps, the least recently used going first; 0 keeps none. */
  constructor(private readonly capacity: number) {}

  remember(row: BookEntity): void {
    if (row.is_external) {
      this.externals.set(row.id, row);
      this.externalByProgramCurrency.set(`${row.program_id}:${row.currency_code}`, row.id);
      return;
    }
    // A Map keeps insertion order: deleting first moves the entry to the young end.
    this.ordinary.delete(row.id);
    this.ordinary.set(row.id, row);
    if (this.ordinary.size > this.capacity) this.ordinary.delete(this.ordinary.keys().next().value!);
  }

  refreshExternalBalances(balances: ExternalBalances[]): void {
    for (const b of balances) {
      const row = this.externals.get(b.id);
      if (row)
        this.externals.set(
          b.id,
          Object.assign({}, row, { posted: b.posted, pending_debits: b.pending_debits, pending_credits: b.pending_credits }),
        );
    }
  }

  row(id: string): BookEntity | undefined {
    return this.ordinary.get(id) ?? this.externals.get(id);
  }

  external(id: string): BookEntity | undefined {
    return this.externals.get(id);
  }

  externalIdFor(programId: string, currencyCode: string): string | undefined {
    return this.externalByProgramCurrency.get(`${programId}:${currencyCode}`);
  }

  /**
   * Notes that a transaction of this process is about to write `ids`, until `release` is called.
   * A batch that would rest on cached rows another transaction is writing takes the locked read
   * instead: its cached versions are about to go stale.
   */
  claimWriting(ids: string[]): () => void {
    for (const id of ids) this.writing.set(id, (this.writing.get(id) ?? 0) + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      for (const id of ids) {
        const n = this.writing.get(id)! - 1;
        if (n === 0) this.writing.delete(id);
        else this.writing.set(id, n);
      }
      // Oldest first: each resumes in the order it began to wait, so the first to claim its rows
      // again is the one that waited longest, and a later one with the same rows waits for it.
      for (let i = 0; i < this.waiters.length; ) {
        const waiter = this.waiters[i]!;
        if (waiter.ids.some((id) => this.writing.has(id))) i++;
        else {
          this.waiters.splice(i, 1);
          waiter.resolve();
        }
      }
    };
  }

  isWriting(id: string): boolean {
    return this.writing.has(id);
  }

  /** Resolves once no transaction of this process is writing any of `ids`. */
  whenWritten(ids: string[]): Promise<void> {
    if (!ids.some((id) => this.writing.has(id))) return Promise.resolve();
    return new Promise((resolve) => this.waiters.push({ ids, resolve }));
  }

  /** How many batches wait for written rows now (`whenWritten`). */
  get waiting(): number {
    return this.waiters.length;
  }

  /** How many ordinary entities are cached. */
  get size(): number {
    return this.ordinary.size;
  }
}

/** The entities `commands` name themselves (legs, funded entity, capture destination), under each command's account. */
export function namedEntityRefs(commands: MoneyCommand[]): AccountRefs {
  const refs = new AccountRefs();
  for (const command of commands) {
    if (command.kind === "create") for (const leg of command.legs) refs.add(command.accountId, leg.entityId);
    if (command.kind === "fund" || command.kind === "defund" || command.kind === "reserve") refs.add(command.accountId, command.entityId);
    if (command.kind === "capture") refs.add(command.accountId, command.destinationEntityId);
  }
  return refs;
}

/** The entity ids `commands` name themselves (legs, funded entity, capture destination). */
export function namedEntityIds(commands: MoneyCommand[]): Set<string> {
  const ids = new Set<string>();
  for (const command of commands) {
    if (command.kind === "create") for (const leg of command.legs) ids.add(leg.entityId);
    if (command.kind === "fund" || command.kind === "defund" || command.kind === "reserve") ids.add(command.entityId);
    if (command.kind === "capture") ids.add(command.destinationEntityId);
  }
  return ids;
}

/**
 * A book over cached rows alone, for a batch that only moves money between entities (transfers,
 * deposits, withdrawals) that this process has cached; undefined when anything the commands need
 * is not in the cache. `{ busy }` when some of those entities a transaction of this process is
 * writing right now: their cached versions are about to be replaced. The caller may wait for that
 * (`EntityCache.whenWritten`) and ask again, which costs one round trip where reading the rows
 * under lock would wait behind the same writes in Postgres and then cost two. Nothing is read or
 * locked here: the write checks the rows' versions (money-persist.ts).
 */
export function cachedBook(commands: MoneyCommand[], cache: EntityCache, now = new Date()): Book | { busy: string[] } | undefined {
  if (!commands.every((command) => command.kind === "create" || command.kind === "fund" || command.kind === "defund")) return undefined;
  const entities = new Map<string, EntityState>();
  const busy: string[] = [];
  for (const id of namedEntityIds(commands)) {
    const row = cache.row(id);
    if (!row) return undefined;
    if (cache.isWriting(id)) busy.push(id);
    entities.set(id, entityState(row));
  }
  if (busy.length > 0) return { busy };
  for (const command of commands) {
    if (command.kind !== "fund" && command.kind !== "defund") continue;
    const entity = entities.get(command.entityId)!.row;
    const externalId = cache.externalIdFor(entity.program_id, entity.currency_code);
    if (!externalId) return undefined;
    if (!entities.has(externalId)) entities.set(externalId, entityState(cache.external(externalId)!));
  }
  return new Book({
    entities,
    groups: new Map(),
    reservations: new Map(),
    captures: new Map(),
    externalIdFor: (p, c) => cache.externalIdFor(p, c),
    now,
  });
}

/**
 * Reads and locks everything `commands` need, in one fixed order so that two transactions never
 * wait on each other in a cycle: groups by id, reservations by account and id, then ordinary
 * entities by id. External entities are never locked: they may go negative, so nothing is checked
 * against their balance, and their rows only receive deltas when the book is written. The answer
 * is a book over those rows, ready to apply the commands to.
 */
export async function loadBook(tx: Tx, commands: MoneyCommand[], cache: EntityCache, now = new Date()): Promise<Book> {
  const groupRefs = new AccountRefs();
  for (const c of commands) if ("groupId" in c && isId("group", c.groupId)) groupRefs.add(c.accountId, c.groupId);
  const groups = await loadGroups(tx, groupRefs, true);

  const reserving = commands.filter((c) => "reservationId" in c);
  const reservations = new Map<string, ReservationRow>();
  const captures = new Map<string, CaptureRow>();
  if (reserving.length > 0) {
    for (const row of await tx<ReservationRow[]>`
      select r.*, e.currency_code from reservations r join entities e on e.account_id = r.account_id and e.id = r.entity_id
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
      const captured = new AccountRefs();
      for (const c of captures.values()) captured.add(c.account_id, c.group_id);
      for (const [id, group] of await loadGroups(tx, captured, false)) groups.set(id, group);
    }
  }

  const entityRefs = namedEntityRefs(commands);
  for (const reservation of reservations.values()) entityRefs.add(reservation.account_id, reservation.entity_id);
  for (const group of groups.values()) for (const leg of group.legs) entityRefs.add(group.account_id, leg.entity_id);
  const { accounts, ids } = entityRefs.sorted((id) => isId("entity", id));
  const entities = new Map<string, EntityState>();
  const track = (row: BookEntity) => entities.set(row.id, entityState(row));
  if (ids.length > 0) {
    // Each row with its balance alerts (balance-alert-watch.ts). Their select is sent with the
    // lock's, not awaited between, so it costs no round trip: it runs once the rows are locked,
    // on a snapshot taken then, which holds every alert committed before, and none is created or
    // deleted until this transaction ends, since that takes the same lock. (A subquery of the
    // locking select would read that select's snapshot, from before it waited for the locks.)
    const [rows, alerts] = await Promise.all([
      tx<BookEntity[]>`
        select ${tx.unsafe(BOOK_ENTITY_COLUMNS)} from entities
        where (account_id, id) in (select * from unnest(${accounts}::text[], ${ids}::text[])) and not is_external
        order by id for update`.execute(),
      tx<BalanceAlertRow[]>`
        select * from balance_alerts
        where (account_id, entity_id) in (select * from unnest(${accounts}::text[], ${ids}::text[])) order by id`.execute(),
    ]);
    const alertsOf = new Map<string, BalanceAlertRow[]>();
    for (const alert of alerts) {
      const list = alertsOf.get(alert.entity_id);
      if (list) list.push(alert);
      else alertsOf.set(alert.entity_id, [alert]);
    }
    for (const row of rows) {
      const watched = alertsOf.get(row.id);
      if (watched) row.alerts = watched;
      track(row);
      cache.remember(row);
    }
    // What is not an ordinary entity is an external one (cached) or does not exist.
    const unknown = ids.flatMap((id, i) => (!entities.has(id) && !cache.external(id) ? [i] : []));
    if (unknown.length > 0) {
      for (const row of await tx<BookEntity[]>`
        select ${tx.unsafe(BOOK_ENTITY_COLUMNS)} from entities
        where (account_id, id) in (select * from unnest(${unknown.map((i) => accounts[i]!)}::text[], ${unknown.map((i) => ids[i]!)}::text[]))
          and is_external`)
        cache.remember(row);
    }
    for (const id of ids) {
      const external = cache.external(id);
      if (external && !entities.has(id)) track(external);
    }
  }

  // Fund and defund post against the external entity of the entity's program and currency.
  for (const command of commands) {
    if (command.kind !== "fund" && command.kind !== "defund") continue;
    const entity = entities.get(command.entityId)?.row;
    if (!entity) continue;
    let externalId = cache.externalIdFor(entity.program_id, entity.currency_code);
    if (!externalId) {
      const [row] = await tx<BookEntity[]>`
        select ${tx.unsafe(BOOK_ENTITY_COLUMNS)} from entities
        where account_id = ${entity.account_id} and program_id = ${entity.program_id} and currency_code = ${entity.currency_code} and is_external`;
      if (row) {
        cache.remember(row);
        externalId = row.id;
      }
    }
    if (externalId && !entities.has(externalId)) track(cache.external(externalId)!);
  }

  return new Book({ entities, groups, reservations, captures, externalIdFor: (p, c) => cache.externalIdFor(p, c), now });
}
