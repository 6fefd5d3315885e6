-- No query needs deliveries in due order across every destination any more: the workers read
-- each destination's due rows through deliveries_due_by_endpoint. The old index cost an entry on
-- every delivery written and leased, and the planner used it to find one destination's oldest
-- due row by walking every other destination's older rows first: a slow claim once a slow
-- destination had a backlog, or while the rows just stopped were still in it
-- (docs/decisions/webhook-claim-lookup.md).
drop index if exists deliveries_due;
