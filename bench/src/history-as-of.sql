-- The as-of read's SQL alone (history-reference.ts): this mirrors `findEntityAsOf` in
-- services/ledger/src/history.ts and must change with it. Its moment is a random microsecond
-- between the history's first and last legs.
\set at_us random(:first_us, :last_us)
select e.id, e.account_id, e.program_id, e.name, e.type, e.status, e.status_reason, e.currency_code, e.metadata,
  e.is_external, e.overdraft_limit, e.created_at, e.updated_at,
  coalesce(h.posted, 0) as posted, coalesce(h.pending_debits, 0) as pending_debits,
  coalesce(h.pending_credits, 0) as pending_credits, coalesce(h.held, 0) as held,
  to_timestamp(:at_us / 1000000.0) > clock_timestamp() as future
from ledger.entities e
  left join lateral (
    select posted, pending_debits, pending_credits, held from ledger.entity_balance_history
    where account_id = e.account_id and entity_id = e.id and changed_at < to_timestamp(:at_us / 1000000.0)
    order by changed_at desc limit 1) h on true
where e.id = :entity and e.account_id = :account and e.program_id = :program;
