/**
 * Rows named by account and id, as two parallel arrays for `(account_id, id) in (select * from
 * unnest(accounts, ids))`: every statement names the account of each row it reads (docs/scaling.md).
 * Ordered by id, the lock order of every write; an id named under two accounts is asked under both
 * (it exists under one at most, ids are unique).
 */
export class AccountRefs {
  private readonly seen = new Map<string, { accountId: string; id: string }>();

  add(accountId: string, id: string): void {
    const key = `${accountId}\u0000${id}`;
    if (!this.seen.has(key)) this.seen.set(key, { accountId, id });
  }

  get size(): number {
    return this.seen.size;
  }

  /** The pairs whose id passes `keep`, sorted by id (then account). */
  sorted(keep: (id: string) => boolean = () => true): { accounts: string[]; ids: string[] } {
    const refs = [...this.seen.values()]
      .filter((r) => keep(r.id))
      .sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : a.accountId < b.accountId ? -1 : a.accountId > b.accountId ? 1 : 0));
    return { accounts: refs.map((r) => r.accountId), ids: refs.map((r) => r.id) };
  }
}
