-- A transaction group names its account and program, and a leg its group and entity. These were
-- foreign keys, which Postgres checks with a trigger per inserted row: a query of its own and a
-- FOR KEY SHARE lock on the referenced row, every account's groups sharing one account row and one
-- program row. For a batch of transfers those triggers were most of the write statement's time:
-- most of a transfer's cost in Postgres that was not the data itself
-- (docs/decisions/references-checked-per-statement.md).
--
-- The only writer of groups and legs is the ledger's write statement (money-persist.ts). It now
-- counts, in one pass over the rows it inserts, the groups whose program is not one of their
-- account's and the legs whose entity does not exist or whose group is not one of the statement's
-- own new groups, and hands the count to this function, which fails the whole statement with
-- Postgres's own foreign_key_violation (23503) unless it is zero: nothing is written. That is as
-- strict as the foreign keys were, and stricter for groups (a program of another account fails).
--
-- What the foreign keys' locks did beyond that, keep a referenced row from being deleted while the
-- write commits, nothing needs: no code deletes an account, a program or an entity, and ordinary
-- entities are locked by the write statement itself. Code that ever deletes one must lock it
-- against writes first.
alter table transaction_groups
  drop constraint transaction_groups_account_id_fkey,
  drop constraint transaction_groups_program_id_fkey;
alter table legs
  drop constraint legs_group_id_fkey,
  drop constraint legs_entity_id_fkey;

create function require_references(dangling bigint) returns boolean
language plpgsql set search_path from current as $$
begin
  if dangling <> 0 then
    raise exception '% new group(s) or leg(s) name an account, program, group or entity that does not exist', dangling
      using errcode = 'foreign_key_violation';
  end if;
  return true;
end
$$;
