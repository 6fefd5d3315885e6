-- The notification service's schema: events as received from JetStream, webhook destinations,
-- deliveries and their attempts. Other services never read these tables.

-- One row per event id: the consumer inserts with ON CONFLICT DO NOTHING, so a redelivered
-- message is harmless. `body` is the delivered JSON, fixed once so every attempt sends the same bytes.
create table events (
  id           text primary key,
  account_id   text not null,
  type         text not null,
  body         text not null,
  created_at   timestamptz not null,
  received_at  timestamptz not null default now()
);
create index events_by_account on events (account_id, id desc);

-- Secrets are AES-256-GCM ciphertexts (see secrets.ts); the previous one signs beside the
-- current one until previous_secret_expires_at, after a roll. Deleted rows stay, soft-deleted,
-- so past deliveries keep their destination and pending ones can end `endpoint_deleted`.
create table endpoints (
  id                          text primary key,
  account_id                  text not null,
  url                         text not null,
  name                        text not null,
  description                 text not null default '',
  enabled                     boolean not null default true,
  event_types                 text[],
  secret                      bytea not null,
  previous_secret             bytea,
  previous_secret_expires_at  timestamptz,
  created_at                  timestamptz not null default now(),
  updated_at                  timestamptz not null default now(),
  deleted_at                  timestamptz
);
create index endpoints_by_account on endpoints (account_id, id desc) where deleted_at is null;

-- A delivery is pending until it succeeds or fails. A worker claims a due one by setting
-- lease_id and pushing next_attempt_at to the lease's end, so another worker sees it as not due;
-- a worker that dies mid-attempt leaves a lease that simply runs out.
create table deliveries (
  id               text primary key,
  account_id       text not null,
  event_id         text not null references events (id),
  endpoint_id      text not null references endpoints (id),
  status           text not null check (status in ('pending', 'succeeded', 'failed')),
  attempts         int not null default 0,
  response_status  int,
  response_body    text,
  duration_ms      int,
  error            text,
  next_attempt_at  timestamptz,
  lease_id         text,
  last_attempt_at  timestamptz,
  created_at       timestamptz not null default now(),
  updated_at       timestamptz not null default now()
);
create index deliveries_due on deliveries (next_attempt_at) where status = 'pending';
create index deliveries_by_endpoint on deliveries (endpoint_id, id desc);
create index deliveries_by_event on deliveries (event_id);

-- Every attempt, for the 7-day stats of GET /webhook.
create table delivery_attempts (
  id               bigserial primary key,
  delivery_id      text not null references deliveries (id),
  endpoint_id      text not null references endpoints (id),
  attempted_at     timestamptz not null default now(),
  succeeded        boolean not null,
  response_status  int,
  duration_ms      int not null,
  error            text
);
create index delivery_attempts_by_endpoint on delivery_attempts (endpoint_id, attempted_at);

-- Idempotency-Key of writes (docs/api.md#idempotency), as in every service. Responses that carry a
-- signing secret are stored without it: a replay reads the secret from the endpoint row, where
-- it is encrypted, so no secret ever rests here in clear.
create table idempotency_keys (
  account_id   text not null,
  key          text not null,
  fingerprint  bytea not null,
  response     bytea,
  created_at   timestamptz not null default now(),
  primary key (account_id, key)
);
create index idempotency_keys_by_age on idempotency_keys (created_at);
