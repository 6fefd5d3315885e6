-- A write of money may rest on entity rows the ledger process cached from an earlier transaction
-- instead of reading and locking them first (docs/architecture.md#cached-balances). The write
-- statement locks those rows, counts the ones whose version (xmin) is still the cached one, and
-- hands the count to this function, which fails the whole statement when any row changed since:
-- nothing is written, and the process applies the same commands again on rows it reads under lock.
-- The error is Postgres's own "could not serialize access" (40001): it is what happened.
create function require_unchanged_entities(unchanged bigint, expected integer) returns boolean
language plpgsql set search_path from current as $$
begin
  if unchanged <> expected then
    raise exception 'entity rows changed since they were cached (% of % unchanged)', unchanged, expected
      using errcode = 'serialization_failure';
  end if;
  return true;
end
$$;
