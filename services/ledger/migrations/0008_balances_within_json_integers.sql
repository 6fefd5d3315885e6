-- Every balance of every entity, available included and the external entity's too, stays within
-- ±(2^53-1), Number.MAX_SAFE_INTEGER: balances reach clients as JSON numbers, and past it a
-- JavaScript client reads another number than the one sent. The ledger refuses a command that would
-- take a balance past it before writing anything (money-rules.ts, `balance_out_of_range`); this
-- check is what holds when it cannot see the whole balance: an external entity is never locked and
-- its balance only receives deltas, so a process checks it against the balance its own last write
-- left, and another process's deposits can have moved it since. The write statement then fails
-- as a whole and the caller gets the same error (database-errors.ts maps this constraint's name).
--
-- An installation whose balances are already past the bound stops here, with Postgres naming this
-- constraint: such a balance was already shown wrongly to JavaScript clients, and needs a person.
alter table entities add constraint entity_balances_within_json_integers check (
  posted between -9007199254740991 and 9007199254740991
  and pending_debits <= 9007199254740991
  and pending_credits <= 9007199254740991
  and held <= 9007199254740991
  and posted - pending_debits - held between -9007199254740991 and 9007199254740991
);
