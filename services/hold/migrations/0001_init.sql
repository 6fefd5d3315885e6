-- The hold service's own records. Money is never here: `held` lives in the ledger, set by its
-- reservations. A hold is written first as an intent ('creating'), then reserved in the ledger,
-- then completed, so a crash at any point leaves a row that recovery can finish.
create table holds (
  id                 text primary key,
  account_id         text not null,
  program_id         text not null,            -- '' until the ledger has resolved the default program
  entity_id          text not null,
  amount             bigint not null check (amount > 0),
  captured_amount    bigint not null default 0 check (captured_amount >= 0),
  status             text not null check (status in ('creating', 'held', 'partially_captured', 'captured', 'releasing', 'released')),
  release_reason     text,
  currency_code      text not null default '',
  expires_at         timestamptz,
  description        text not null default '',
  idempotency_key    text,
  fingerprint        bytea,
  create_response    bytea,
  created_at         timestamptz not null default now(),
  updated_at         timestamptz not null default now(),
  check (captured_amount <= amount)
);
create unique index holds_idempotency on holds (account_id, idempotency_key) where idempotency_key is not null;
create index holds_by_entity on holds (entity_id, id desc);
create index holds_due on holds (expires_at) where status in ('held', 'partially_captured') and expires_at is not null;
create index holds_unfinished on holds (updated_at) where status in ('creating', 'releasing');

create table captures (
  id                     text primary key,       -- <hold id>:<n>, also the ledger's capture id
  hold_id                text not null references holds (id),
  amount                 bigint not null check (amount > 0),
  destination_entity_id  text not null,
  description            text not null default '',
  status                 text not null check (status in ('pending', 'done')),
  transaction_group_id   text,
  idempotency_key        text,
  fingerprint            bytea,
  response               bytea,
  created_at             timestamptz not null default now()
);
create unique index captures_idempotency on captures (hold_id, idempotency_key) where idempotency_key is not null;
create index captures_pending on captures (created_at) where status = 'pending';

create table outbox (
  seq         bigserial primary key,
  event_id    text not null unique,
  subject     text not null,
  payload     bytea not null,
  created_at  timestamptz not null default now()
);
