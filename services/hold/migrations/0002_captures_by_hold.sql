-- Every capture intent sums the pending captures of its hold and counts its captures (the next
-- capture id); without this index each did a sequential scan of all captures ever made.
create index captures_by_hold on captures (hold_id);
