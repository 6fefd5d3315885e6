-- The delivery workers claim, per destination, its oldest due deliveries; this index lets them
-- read just those rows instead of ranking the whole backlog on every claim.
create index deliveries_due_by_endpoint on deliveries (endpoint_id, next_attempt_at, id) where status = 'pending';
