-- GET /events?object_id= (docs/webhooks.md#endpoints): the events about one object, such as every
-- transaction.* event of a transaction group. The consumer stores the object's id with each event
-- as it arrives (events.ts); events stored before this migration get theirs from their body here.
alter table events add column object_id text;

update events set object_id = case
    when type like 'transaction.%' then body::jsonb -> 'data' ->> 'transaction_group_id'
    when type like 'hold.%' then body::jsonb -> 'data' ->> 'hold_id'
    when type like 'entity.%' then body::jsonb -> 'data' ->> 'entity_id'
    when type like 'balance.%' then body::jsonb -> 'data' -> 'alert' ->> 'alert_id'
  end
where object_id is null;

-- An object's events, newest first, as the account's list pages them.
create index if not exists events_by_object on events (account_id, object_id, id desc) where object_id is not null;
