-- Balances over time (docs/architecture.md#balance-history): an entity's balances as of any moment
-- (GET /entity?as_of=) and its statements (GET /entity/statement), each answered by an index probe
-- or a range scan, never by reading the entity's whole history. The write statement
-- (money-persist.ts) records them in the same statement as the change itself:
--
-- - `entity_balance_history`: one row per entity a write changed, with its five balances after the
--   write, stamped `changed_at`. A read as of T takes the entity's last row before T.
-- - `legs.posted_at`, `posted_seq`, `posted_after`: a leg that became posted (created posted, or
--   its pending group posted) carries the stamp of the write that posted it, its place among the
--   legs that write posted, and its entity's posted balance right after it. A statement is a range
--   of these on one entity; its opening and closing balances are the `posted_after` of the last leg
--   before each end. Columns on the leg rather than a table of their own: the write inserts the leg
--   anyway, so a posted leg costs no extra row, only the index entry below.
--
-- A write stamps an entity with clock_timestamp() taken once it holds the entity's row lock, and
-- always later than the entity's previous stamp (`entities.balance_changed_at`, so the order holds
-- even if the clock steps back): per entity, stamps increase strictly in commit order.

alter table entities add column balance_changed_at timestamptz;

alter table legs
  add column posted_at timestamptz,
  add column posted_seq integer,
  add column posted_after bigint;

-- Written only by the write statement, which checks what it references itself (0007): no foreign key.
create table entity_balance_history (
  entity_id        text not null,
  changed_at       timestamptz not null,
  posted           bigint not null,
  pending_debits   bigint not null,
  pending_credits  bigint not null,
  held             bigint not null,
  primary key (entity_id, changed_at)
);

-- Existing data. The moment a leg was posted was not kept before this migration, so it is taken
-- from its group: a posted group that was never disputed changed last when it was posted (its
-- creation, for one created posted); for a disputed or reversed group the creation is taken. The
-- legs of each entity are chained in that order (then by id), so every `posted_after` is the one
-- before it plus the leg's signed amount, and the last is the entity's posted balance.
update legs l
set posted_at = p.at, posted_seq = p.seq, posted_after = p.after
from (
  select l.id, x.at,
    row_number() over (partition by l.entity_id, x.at order by l.id)::int as seq,
    sum(case l.direction when 'credit' then l.amount else -l.amount end)
      over (partition by l.entity_id order by x.at, l.id rows unbounded preceding) as after
  from legs l
    join transaction_groups g on g.id = l.group_id
    cross join lateral (select case when g.status = 'posted' and not g.disputed then g.updated_at else g.created_at end as at) x
  where g.status in ('posted', 'reversed')
) p
where l.id = p.id;

-- A statement page is a range of one entity's posted legs in (posted_at, posted_seq) order, and
-- opening and closing balances are a probe of the same index. Unique: the keyset cursor's order.
create unique index legs_posted_by_entity on legs (entity_id, posted_at, posted_seq) where posted_at is not null;

-- The posted balance after each of those moments. Pending debits and credits and held were not
-- kept over time, so these rows carry 0 for them (docs/api.md#balances-over-time).
insert into entity_balance_history (entity_id, changed_at, posted, pending_debits, pending_credits, held)
select distinct on (entity_id, posted_at) entity_id, posted_at, posted_after, 0, 0, 0
from legs
where posted_at is not null
order by entity_id, posted_at, posted_seq desc;

-- A baseline per entity: its balances now, exactly, stamped now (or just after its last posting,
-- should a process clock have stamped that ahead of the database's), where new writes go on from.
with baseline as (
  update entities e
  set balance_changed_at = greatest(
    now(),
    (select max(l.posted_at) from legs l where l.entity_id = e.id and l.posted_at is not null) + interval '1 microsecond')
  returning e.id, e.balance_changed_at, e.posted, e.pending_debits, e.pending_credits, e.held)
insert into entity_balance_history (entity_id, changed_at, posted, pending_debits, pending_credits, held)
select id, balance_changed_at, posted, pending_debits, pending_credits, held from baseline;
