-- Idempotency-Key responses are now stored whole, the signing secret of a create or roll
-- included, so that a replay returns exactly what the first call did; they are sealed with
-- AES-256-GCM under NOTIFICATION_SECRET_KEY first (see src/secrets.ts), so no secret rests here in
-- clear. This replaces the note of 0001 that such responses were stored without their secret.
comment on column idempotency_keys.response is
  'The first response, AES-256-GCM sealed under NOTIFICATION_SECRET_KEY (src/secrets.ts); null while the first call runs.';
