-- The outbox keeps one row per write instead of one per event (docs/architecture.md#the-transactional-outbox-and-the-relay):
-- a transaction that commits 100 transfers inserts, indexes, selects and deletes one row, not 100.
-- The relay still publishes each event as its own message. `events` is the arrays' length, so the
-- relay can size its batches and the backlog gauge count events without reading the arrays.

-- Replicas of the previous version may be running (a rolling upgrade). This waits for their
-- transactions that write or relay `outbox` rows to end and holds new ones off until this commits,
-- so every row they commit is either moved below or goes through the trigger.
lock table outbox in exclusive mode;

create table outbox_writes (
  seq         bigserial primary key,
  events      int not null,
  event_ids   text[] not null,
  subjects    text[] not null,
  payloads    bytea[] not null,
  created_at  timestamptz not null default now(),
  check (events > 0 and cardinality(event_ids) = events and cardinality(subjects) = events and cardinality(payloads) = events)
);

-- Events waiting in the per-event table move over, in order, with their commit times.
with moved as (delete from outbox returning seq, event_id, subject, payload, created_at)
insert into outbox_writes (events, event_ids, subjects, payloads, created_at)
select 1, array[event_id], array[subject], array[payload], created_at from moved order by seq;

-- During a rolling upgrade replicas of the previous version still insert into `outbox`: each such
-- row goes to `outbox_writes` instead, in the same transaction, so the new relays publish it and the
-- old relays find nothing to publish (docs/operations.md#upgrade-notes). A later release drops both.
create function outbox_to_writes() returns trigger language plpgsql set search_path from current as $$
begin
  insert into outbox_writes (events, event_ids, subjects, payloads, created_at)
  values (1, array[new.event_id], array[new.subject], array[new.payload], new.created_at);
  return null;
end
$$;
create trigger outbox_to_writes before insert on outbox for each row execute function outbox_to_writes();
