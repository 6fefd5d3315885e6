-- Listing and searching (docs/architecture.md#listing-and-searching): a program's groups newest
-- first, and the created_at and metadata filters of the group and entity lists. None of these
-- columns changes after insert (a money command updates status and balances, which no index here
-- holds), so updates of these rows can stay HOT. `if not exists`: a large installation may build
-- them beforehand with CREATE INDEX CONCURRENTLY under these names (docs/operations.md).

-- A program's groups newest first, page after page (keyset on id, as every list); before this, only
-- the primary key ordered groups, and a small program's page walked past every other program's.
create index if not exists transaction_groups_by_program on transaction_groups (program_id, id desc);

-- A created_at range within a program: up to 5,000 rows are read here in time order and sorted by
-- id; a wider range is read in id order through the index above, filtering created_at
-- (services/ledger/src/list-query.ts).
create index if not exists transaction_groups_by_program_and_time on transaction_groups (program_id, created_at);
create index if not exists entities_by_program_and_time on entities (program_id, created_at);

-- metadata[KEY]=VALUE, any key: `metadata @> '{"KEY": VALUE}'`. jsonb_path_ops indexes a hash of
-- each path-and-value, which is what containment asks for, and is smaller and faster than the
-- default jsonb_ops (which also serves key-exists queries no list makes). Only rows with metadata:
-- most money carries none, and `@>` never matches null, so the planner uses the partial index.
create index if not exists transaction_groups_by_metadata on transaction_groups using gin (metadata jsonb_path_ops) where metadata is not null;
create index if not exists entities_by_metadata on entities using gin (metadata jsonb_path_ops) where metadata is not null;
