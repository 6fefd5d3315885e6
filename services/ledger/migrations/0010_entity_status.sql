-- An entity is active, frozen or closed (docs/api.md#entities-over-time). The money rules refuse
-- what each status forbids before anything is written (money-rules.ts); these checks hold if the
-- code above them ever fails to.
alter table entities
  add column status_reason text not null default '',
  add constraint entity_status_known check (status in ('active', 'frozen', 'closed')),
  add constraint entity_external_always_active check (not is_external or status = 'active'),
  -- Closing needs every balance at zero, and nothing may move a closed entity's money again.
  add constraint closed_entity_is_empty check (
    status <> 'closed' or (posted = 0 and pending_debits = 0 and pending_credits = 0 and held = 0)
  );

-- A frozen entity takes credits and the settlement of what was in flight (posting, canceling or
-- failing its pending groups, capturing or releasing its holds), none of which lowers available;
-- every new debit does. So a write that lowers a frozen entity's available is refused. The WHEN is
-- evaluated in the executor, so writes that pass it never call the function.
create function refuse_frozen_debit() returns trigger
language plpgsql set search_path from current as $$
begin
  raise exception 'entity % is frozen', new.id
    using errcode = 'check_violation', constraint = 'frozen_entity_not_debited';
end
$$;

create trigger frozen_entity_not_debited
  before update on entities
  for each row
  when (
    old.status = 'frozen' and new.status = 'frozen'
    and new.posted - new.pending_debits - new.held < old.posted - old.pending_debits - old.held
  )
  execute function refuse_frozen_debit();
