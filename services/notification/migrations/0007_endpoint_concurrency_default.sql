-- The default a destination gets when its creator does not say (src/endpoints.ts): enough
-- attempts in flight to cover the round trips of a receiver that answers at once. Destinations
-- created before keep the value they have.
alter table endpoints alter column max_concurrency set default 128;
