-- The request id of the call that caused an event, so a delivery attempt's log line can be found
-- from the gateway's request log and the other way round.
alter table events add column request_id text not null default '';
