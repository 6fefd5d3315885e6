/**
 * The ledger's money tables: every one keyed by account first (migrations/0014_keys_by_account.sql),
 * every statement on them names the account, and each would be distributed by `account_id` in a
 * distributed Postgres (docs/scaling.md). Not here: `accounts` (its id is the account) and
 * `api_keys` (a key is looked up by its hash before its account is known).
 */
export const MONEY_TABLES = [
  "programs",
  "entities",
  "transaction_groups",
  "legs",
  "entity_balance_history",
  "idempotency_keys",
  "reservations",
  "reservation_captures",
  "balance_alerts",
  "outbox_writes",
] as const;
