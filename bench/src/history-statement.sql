-- The statement page's SQL alone (history-reference.ts): this mirrors `statementPage` in
-- services/ledger/src/history.ts, for a first page (no cursor, as the bench's pages have none),
-- and must change with it. The window starts at a random microsecond no later than the leg two
-- pages before the last, so it holds more than a page.
\set from_us random(:first_us, :last_from_us)
-- The window ends a second after the last leg: pgbench cannot look up the moment two pages of
-- legs after its start, where the bench's requests end theirs, and the limit keeps the page to
-- the same page_limit legs (the page and one more) either way.
\set to_us :last_us + 1000000
select
  (select posted_after from ledger.legs where account_id = :account and entity_id = :entity and posted_at < to_timestamp(:from_us / 1000000.0)
   order by posted_at desc, posted_seq desc limit 1) as opening,
  (select posted_after from ledger.legs where account_id = :account and entity_id = :entity and posted_at < to_timestamp(:to_us / 1000000.0)
   order by posted_at desc, posted_seq desc limit 1) as closing,
  p.*
from (values (1)) as one
  left join lateral (
    select l.id, l.group_id, l.direction, l.amount, l.posted_seq, l.posted_after, l.posted_us,
      (select g.description from ledger.transaction_groups g where g.account_id = l.account_id and g.id = l.group_id) as description
    from (
      select id, account_id, group_id, direction, amount, posted_seq, posted_after, posted_at,
        (extract(epoch from posted_at) * 1000000)::int8 as posted_us
      from ledger.legs
      where account_id = :account and entity_id = :entity
        and posted_at >= to_timestamp(:from_us / 1000000.0) and posted_at < to_timestamp(:to_us / 1000000.0)
      order by posted_at, posted_seq
      limit :page_limit) l
    order by l.posted_at, l.posted_seq) as p on true;
