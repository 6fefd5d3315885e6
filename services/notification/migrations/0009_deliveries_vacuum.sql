-- deliveries is the delivery queue as well as its history: each delivery is inserted, leased and
-- ended, and the pending versions it leaves behind stay in deliveries_due_by_endpoint until a
-- vacuum removes them. Every claim walks past those entries to reach the oldest due row, so with
-- many of them a drain cost Postgres several times the CPU per delivery
-- (docs/decisions/deliveries-autovacuum.md). Autovacuum
-- by default waits for dead rows worth 20% of the table, which in a table of millions of past
-- deliveries is hundreds of thousands: this table is vacuumed once 10,000 have piled up, on
-- autovacuum's next round (docs/operations.md#vacuum).
alter table deliveries set (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 10000);
