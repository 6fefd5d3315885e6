-- The ledger's schema: identity (accounts, API keys, programs), entities with their balances,
-- transaction groups and legs, idempotency keys and the outbox. Money is bigint, minor units.

create table accounts (
  id          text primary key,
  name        text not null,
  created_at  timestamptz not null default now()
);

-- Keys are stored only as SHA-256 of the key: they are long random strings, so a fast hash is
-- enough, and a look-up by hash leaks nothing useful through timing.
create table api_keys (
  id          text primary key,
  account_id  text not null references accounts (id),
  key_hash    bytea not null unique,
  created_at  timestamptz not null default now(),
  revoked_at  timestamptz
);

create table programs (
  id             text primary key,
  account_id     text not null references accounts (id),
  name           text not null,
  currency_code  text not null check (currency_code ~ '^[A-Z]{3}$'),
  is_default     boolean not null default false,
  created_at     timestamptz not null default now()
);
create unique index programs_one_default_per_account on programs (account_id) where is_default;
create index programs_by_account on programs (account_id, id desc);

-- Balances live on the entity row, updated in the same transaction as the legs that change them.
-- The check is the last line of defence against an overdraft: even a bug in the code above it
-- cannot commit a negative available balance on an ordinary entity.
create table entities (
  id               text primary key,
  account_id       text not null references accounts (id),
  program_id       text not null references programs (id),
  name             text not null,
  type             text not null,
  status           text not null default 'active',
  currency_code    text not null check (currency_code ~ '^[A-Z]{3}$'),
  metadata         jsonb,
  is_external      boolean not null default false,
  posted           bigint not null default 0,
  pending_debits   bigint not null default 0 check (pending_debits >= 0),
  pending_credits  bigint not null default 0 check (pending_credits >= 0),
  held             bigint not null default 0 check (held >= 0),
  created_at       timestamptz not null default now(),
  updated_at       timestamptz not null default now(),
  constraint ordinary_entity_not_overdrawn check (is_external or posted - pending_debits - held >= 0)
);
create unique index entities_one_external_per_currency on entities (program_id, currency_code) where is_external;
create index entities_by_program on entities (program_id, id desc);
create index entities_by_program_and_type on entities (program_id, type, id desc);

create table transaction_groups (
  id                    text primary key,
  account_id            text not null references accounts (id),
  program_id            text not null references programs (id),
  status                text not null check (status in ('pending', 'posted', 'canceled', 'failed', 'reversed')),
  description           text not null default '',
  metadata              jsonb,
  currency_code         text not null,
  amount                bigint not null check (amount > 0),
  disputed              boolean not null default false,
  reason                text not null default '',
  reverses_group_id     text references transaction_groups (id),
  reversed_by_group_id  text references transaction_groups (id),
  created_at            timestamptz not null default now(),
  updated_at            timestamptz not null default now()
);

-- A leg's status is always its group's; it is read through the join, never stored twice.
-- position keeps the legs in the order the request gave them (two-party: debit, then credit).
create table legs (
  id          text primary key,
  group_id    text not null references transaction_groups (id),
  position    int not null,
  entity_id   text not null references entities (id),
  direction   text not null check (direction in ('debit', 'credit')),
  amount      bigint not null check (amount > 0),
  created_at  timestamptz not null default now()
);
create index legs_by_entity on legs (entity_id, id desc);
create index legs_by_group on legs (group_id);

create table idempotency_keys (
  account_id   text not null,
  key          text not null,
  fingerprint  bytea not null,
  response     bytea,
  created_at   timestamptz not null default now(),
  primary key (account_id, key)
);
create index idempotency_keys_by_age on idempotency_keys (created_at);

-- Events committed with their state change, waiting for the relay to publish them.
create table outbox (
  seq         bigserial primary key,
  event_id    text not null unique,
  subject     text not null,
  payload     bytea not null,
  created_at  timestamptz not null default now()
);
