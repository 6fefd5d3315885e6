-- Per-destination concurrency is a setting of the destination, not of a process: at most
-- max_concurrency attempts to it are leased at once, counted across every notification process
-- (the claim counts live leases while it holds the destination's advisory lock; see src/worker.ts).
alter table endpoints add column max_concurrency int not null default 32
  check (max_concurrency between 1 and 256);
-- The live leases of one destination, counted at every claim without reading its backlog.
create index deliveries_leased_by_endpoint on deliveries (endpoint_id) where status = 'pending' and lease_id is not null;
