-- The W3C traceparent of the span that stored an event, so its delivery attempts, possibly hours
-- later, join the trace of the call that caused it. Internal only: receivers never get it.
alter table events add column traceparent text not null default '';
