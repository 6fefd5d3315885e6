-- Reservation and capture ids are chosen by the caller (the hold id, `<hold id>:<n>`), so they are
-- unique within an account, not across accounts: one account's ids can never collide with, and so
-- never block or answer for, another account's.
alter table reservation_captures add column account_id text;
update reservation_captures c set account_id = r.account_id from reservations r where r.id = c.reservation_id;
alter table reservation_captures alter column account_id set not null;

alter table reservation_captures drop constraint reservation_captures_reservation_id_fkey;
alter table reservation_captures drop constraint reservation_captures_pkey;
alter table reservations drop constraint reservations_pkey;
alter table reservations add primary key (account_id, id);
alter table reservation_captures add primary key (account_id, id);
alter table reservation_captures add foreign key (account_id, reservation_id) references reservations (account_id, id);

drop index reservation_captures_by_reservation;
create index reservation_captures_by_reservation on reservation_captures (account_id, reservation_id);
