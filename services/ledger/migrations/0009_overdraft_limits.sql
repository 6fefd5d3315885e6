-- An ordinary entity may be allowed to go below zero, down to minus its overdraft limit
-- (docs/architecture.md#money-rules-and-invariants): a debit needs available - amount >= -limit.
-- The limit is an amount, so it stays within 0 .. 2^53-1 like every amount.
alter table entities
  add column overdraft_limit bigint not null default 0
    constraint entity_overdraft_limit_is_an_amount check (overdraft_limit between 0 and 9007199254740991);

-- The no-overdraft check was `available >= 0` on every row. With a limit it cannot simply become
-- `available >= -overdraft_limit`: lowering the limit below what is already used is allowed and
-- only refuses further debits, so a row may rest below its limit. What always holds is that a write
-- which lowers an ordinary entity's available leaves it at -limit or above (a batch that ends lower
-- than it began has a last debit, and that debit had to end at -limit or above). The trigger's WHEN
-- is evaluated in the executor, so rows that pass it (every write the ledger's rules let through)
-- never call the function.
alter table entities drop constraint ordinary_entity_not_overdrawn;

create function refuse_overdraft() returns trigger
language plpgsql set search_path from current as $$
begin
  raise exception 'entity % would have % available, below its overdraft limit %',
    new.id, new.posted - new.pending_debits - new.held, new.overdraft_limit
    using errcode = 'check_violation', constraint = 'ordinary_entity_not_overdrawn';
end
$$;

-- Entities are inserted with zero balances, so only updates need the check.
create trigger ordinary_entity_not_overdrawn
  before update on entities
  for each row
  when (
    not new.is_external
    and new.posted - new.pending_debits - new.held < -new.overdraft_limit
    and new.posted - new.pending_debits - new.held < old.posted - old.pending_debits - old.held
  )
  execute function refuse_overdraft();
