-- Reservations: money set aside in an entity (entities.held) on behalf of a hold. Ids are chosen
-- by the caller (the hold id, the capture id), which is what makes every call idempotent.
create table reservations (
  id               text primary key,
  account_id       text not null references accounts (id),
  program_id       text not null references programs (id),
  entity_id        text not null references entities (id),
  amount           bigint not null check (amount > 0),
  captured_amount  bigint not null default 0 check (captured_amount >= 0),
  status           text not null check (status in ('active', 'released')),
  created_at       timestamptz not null default now(),
  updated_at       timestamptz not null default now(),
  check (captured_amount <= amount)
);
create index reservations_active_by_entity on reservations (entity_id) where status = 'active';

create table reservation_captures (
  id              text primary key,
  reservation_id  text not null references reservations (id),
  amount          bigint not null check (amount > 0),
  group_id        text not null references transaction_groups (id),
  created_at      timestamptz not null default now()
);
create index reservation_captures_by_reservation on reservation_captures (reservation_id);
