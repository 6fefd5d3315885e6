-- GET /webhooks/delivery/attempts (docs/webhooks.md#endpoints) lists one delivery's attempts,
-- newest first: one range of this index, however many attempts its destination has.
create index if not exists delivery_attempts_by_delivery on delivery_attempts (delivery_id, id desc);
