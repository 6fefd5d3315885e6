-- Balance alerts (docs/api.md#balance-alerts): a condition on one balance of an entity, such as
-- "available lt 1000". `triggered` is the condition on the entity's balances as they are: set at
-- creation under the entity's row lock, and turned by the one statement that writes the entity's
-- balances (money-persist.ts) whenever a call or batch turns the condition, with its event in the
-- same transaction.
--
-- Creating or deleting an alert takes the entity's row lock and writes a new version of the row
-- (nothing in it changes), so a write that rests on the version the process cached fails its
-- version check and is applied again on the row read under lock, with the alerts as they now are
-- (docs/architecture.md#cached-balances).
create table balance_alerts (
  id          text primary key,
  account_id  text not null references accounts (id),
  program_id  text not null references programs (id),
  entity_id   text not null references entities (id),
  field       text not null check (field in ('available', 'posted')),
  operator    text not null check (operator in ('lt', 'lte', 'gt', 'gte')),
  -- Within ±(2^53-1), as every balance is (0008_balances_within_json_integers.sql).
  value       bigint not null check (value between -9007199254740991 and 9007199254740991),
  triggered   boolean not null,
  created_at  timestamptz not null default now()
);

-- The locked read of a money batch looks up the alerts of every entity it locks: one probe of this
-- index per entity, which finds nothing for an entity without alerts. Listing reads it in id order.
create index balance_alerts_by_entity on balance_alerts (entity_id, id);
