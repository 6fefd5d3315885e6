-- Recovery runs in every replica of the hold service. Each pass claims the unfinished operations it
-- will finish by setting a lease on them, in one statement that skips rows another replica is
-- claiming at that moment; a leased row is left alone until its lease runs out, which is then the
-- sign that the replica holding it stopped (docs/architecture.md#hold-intents-and-recovery).
alter table holds add column recovery_lease_until timestamptz;
alter table captures add column recovery_lease_until timestamptz;
