-- API keys have a lifecycle (docs/operations.md#api-keys): operators list them, revoke them and see when
-- each was last used, without ever seeing a key again after it was created.
-- prefix: the first characters of the key (`lsk_` and 8 random ones), to tell keys apart in a
-- list; null for keys created before it was kept, since only their hash is known.
-- last_used_at: when the key last authenticated a request, to the minute (flushed in batches,
-- never written per request).
alter table api_keys add column prefix text;
alter table api_keys add column last_used_at timestamptz;
create index api_keys_by_account on api_keys (account_id, id);
