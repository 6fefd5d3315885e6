-- The entity list's `name` filter (docs/api.md#filters): entities whose name contains a text, in
-- any case, as `lower(name) like lower('%text%')`. A btree serves only a prefix; pg_trgm's GIN index
-- of trigrams serves a text anywhere in the name (services/ledger/src/list-query.ts reads its
-- candidates through it, as for a metadata filter).
--
-- pg_trgm comes with Postgres (Debian's postgresql package includes contrib) and is a trusted
-- extension since Postgres 13: a database owner without superuser may create it. It goes into
-- `public`, not this service's schema: an extension belongs to one schema per database, and the
-- services' schemas (or a test's) must not own what another schema's index uses. When it is
-- already installed (in whichever schema), the index names that schema's operator class.
--
-- Migrations of different schemas of one database run side by side (each under its own schema's
-- lock), and two `create extension if not exists` at once can both try to create it: the second
-- would fail on a duplicate key. This lock, the database's own, makes the second wait and find it.
select pg_advisory_xact_lock(hashtext('ledger migration: create extension pg_trgm'));
create extension if not exists pg_trgm with schema public;

do $$
declare
  trgm_schema text := (
    select n.nspname from pg_extension e join pg_namespace n on n.oid = e.extnamespace where e.extname = 'pg_trgm'
  );
begin
  -- `if not exists`: a large installation may build it beforehand with CREATE INDEX CONCURRENTLY
  -- under this name (docs/operations.md).
  execute format(
    'create index if not exists entities_by_name on entities using gin (lower(name) %I.gin_trgm_ops)',
    trgm_schema
  );
end
$$;
