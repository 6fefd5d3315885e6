-- Every money table is keyed by account first (docs/scaling.md#the-step-after-one-primary-citus-distributed-by-account):
-- its primary key, every unique index and every foreign key between money tables start with
-- `account_id`, so the tables can be distributed (Citus) or partitioned by it, each account's rows
-- together and every transaction of one account on one node. Ids stay random and unique across
-- accounts as before; the account in front is for routing, not for uniqueness.
--
-- Tables that did not carry the account (legs, entity_balance_history, outbox_writes) get it, from
-- their parent row. Replicas of the previous version cannot write after this (they insert legs and
-- history without the account): this migration needs them stopped first (docs/operations.md#upgrade-notes).
--
-- Not keyed by account: `accounts` (its id is the account) and `api_keys` (a key is looked up by its
-- hash before its account is known; a reference table in Citus).

-- Nothing writes to the per-event outbox of 0005 any more (its trigger moved every row to
-- outbox_writes, and the replicas that wrote it cannot run past this migration): it goes.
drop trigger outbox_to_writes on outbox;
drop function outbox_to_writes();
drop table outbox;

-- The account of each row that did not carry it, from its parent.
alter table legs add column account_id text;
update legs l set account_id = g.account_id from transaction_groups g where g.id = l.group_id;
alter table legs alter column account_id set not null;

alter table entity_balance_history add column account_id text;
update entity_balance_history h set account_id = e.account_id from entities e where e.id = h.entity_id;
alter table entity_balance_history alter column account_id set not null;

-- An outbox row holds the events of one account's write (a transaction that mixes accounts writes
-- one row per account). Rows written before this, not yet relayed, hold events of any account: they
-- get a blank account, and the relay publishes them in order as before.
alter table outbox_writes add column account_id text not null default '';
alter table outbox_writes alter column account_id drop default;

-- Foreign keys that name a key about to change go first.
alter table entities drop constraint entities_program_id_fkey;
alter table reservations drop constraint reservations_program_id_fkey, drop constraint reservations_entity_id_fkey;
alter table balance_alerts drop constraint balance_alerts_program_id_fkey, drop constraint balance_alerts_entity_id_fkey;
alter table reservation_captures drop constraint reservation_captures_group_id_fkey;
alter table transaction_groups
  drop constraint transaction_groups_reverses_group_id_fkey,
  drop constraint transaction_groups_reversed_by_group_id_fkey;

-- Primary keys, account first.
alter table programs drop constraint programs_pkey, add primary key (account_id, id);
alter table entities drop constraint entities_pkey, add primary key (account_id, id);
alter table transaction_groups drop constraint transaction_groups_pkey, add primary key (account_id, id);
alter table legs drop constraint legs_pkey, add primary key (account_id, id);
alter table entity_balance_history drop constraint entity_balance_history_pkey, add primary key (account_id, entity_id, changed_at);
alter table balance_alerts drop constraint balance_alerts_pkey, add primary key (account_id, id);
alter table outbox_writes drop constraint outbox_writes_pkey, add primary key (account_id, seq);
-- (idempotency_keys, reservations and reservation_captures were already keyed (account_id, ...).)

-- The relay takes the oldest rows of the whole table, in seq order, and deletes them by seq
-- (packages/common/src/outbox.ts); on a distributed table it does that on each shard.
create index outbox_writes_by_seq on outbox_writes (seq);

-- Unique indexes, account first.
drop index entities_one_external_per_currency;
create unique index entities_one_external_per_currency on entities (account_id, program_id, currency_code) where is_external;
drop index legs_posted_by_entity;
create unique index legs_posted_by_entity on legs (account_id, entity_id, posted_at, posted_seq) where posted_at is not null;

-- Foreign keys between money tables, composite: a row can only reference its own account's rows.
alter table entities add foreign key (account_id, program_id) references programs (account_id, id);
alter table reservations
  add foreign key (account_id, program_id) references programs (account_id, id),
  add foreign key (account_id, entity_id) references entities (account_id, id);
alter table balance_alerts
  add foreign key (account_id, program_id) references programs (account_id, id),
  add foreign key (account_id, entity_id) references entities (account_id, id);
alter table reservation_captures add foreign key (account_id, group_id) references transaction_groups (account_id, id);
alter table transaction_groups
  add foreign key (account_id, reverses_group_id) references transaction_groups (account_id, id),
  add foreign key (account_id, reversed_by_group_id) references transaction_groups (account_id, id);
