-- Idempotency keys of every POST (create, capture, release), as in the other services
-- (packages/common/src/idempotency.ts): per account, remembered for 24 hours. `operation` names the
-- intent a key's first request started (`create:<hold id>`, `capture:<capture id>`,
-- `release:<hold id>`): whoever completes that intent, the request or recovery after a crash,
-- stores the response for every key waiting on it.
create table idempotency_keys (
  account_id   text not null,
  key          text not null,
  fingerprint  bytea not null,
  response     bytea,
  operation    text,
  created_at   timestamptz not null default now(),
  primary key (account_id, key)
);
create index idempotency_keys_by_age on idempotency_keys (created_at);
create index idempotency_keys_unanswered on idempotency_keys (operation) where response is null;

-- Keys of the last 24 hours move over with their responses, or, when their intent is unfinished,
-- with the operation recovery will answer them from.
insert into idempotency_keys (account_id, key, fingerprint, response, operation, created_at)
select account_id, idempotency_key, fingerprint, create_response,
       case when create_response is null then 'create:' || id end, created_at
from holds
where idempotency_key is not null and fingerprint is not null and created_at > now() - interval '24 hours'
on conflict do nothing;
insert into idempotency_keys (account_id, key, fingerprint, response, operation, created_at)
select h.account_id, c.idempotency_key, c.fingerprint, c.response,
       case when c.response is null then 'capture:' || c.id end, c.created_at
from captures c join holds h on h.id = c.hold_id
where c.idempotency_key is not null and c.fingerprint is not null and c.created_at > now() - interval '24 hours'
  and (c.response is not null or c.status = 'pending')
order by c.created_at
on conflict do nothing;

drop index holds_idempotency;
drop index captures_idempotency;
alter table holds drop column idempotency_key, drop column fingerprint, drop column create_response;
alter table captures drop column idempotency_key, drop column fingerprint, drop column response;
