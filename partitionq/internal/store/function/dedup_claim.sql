-- A send claims dedup ids p_ids (distinct; p_keys[i] the key of the message
-- that carries p_ids[i], p_counts[i] how many messages of the send carry it,
-- p_windows_us[i] its window in microseconds, null for the queue's). Per
-- id it returns claimed true when the send now owns it (a new id, one whose
-- record expired, or one left without an event): the send then inserts the
-- event and records it with dedup_record in the same transaction. Otherwise
-- the record is live: ev_id and key are the first send's, and the record
-- counts the hits. A concurrent send of the same id waits for this one's
-- transaction (the primary key), then sees its outcome: its event if it
-- committed, a free id if it rolled back. Under REPEATABLE READ or
-- SERIALIZABLE a record committed after the caller's snapshot is a
-- serialization failure (40001): retry the transaction.
--
-- Without p_upsert the rows are inserted plainly, a third of the work of
-- an INSERT ... ON CONFLICT (its speculative insertion): for a large batch
-- of new ids, the usual case. An id that has a record (or that a
-- concurrent send commits meanwhile) makes that insert fail with
-- unique_violation (23505), and the caller claims again with p_upsert,
-- the ON CONFLICT path.
create or replace function partitionq.dedup_claim(p_queue text, p_ids text[], p_keys text[], p_counts int[], p_windows_us bigint[],
    p_upsert boolean default false)
returns table (dedup_id text, claimed boolean, ev_id bigint, key text)
language plpgsql security definer set search_path = pg_catalog, partitionq, pg_temp as $f$
#variable_conflict use_column
declare
    v_n      int := coalesce(cardinality(p_ids), 0);
    v_now    timestamptz := statement_timestamp();
    v_window interval;
begin
    if p_queue is null or coalesce(cardinality(p_keys), 0) <> v_n or coalesce(cardinality(p_counts), 0) <> v_n
       or coalesce(cardinality(p_windows_us), 0) <> v_n then
        raise exception 'dedup_claim needs a queue and, per dedup id, a key, a count and a window' using errcode = '22023';
    end if;
    if exists (select 1 from unnest(p_ids, p_keys, p_counts, p_windows_us) u(id, k, c, w)
                where u.id is null or u.id = '' or octet_length(u.id) > 512 or u.k is null or u.c is null or u.c < 1
                   or u.w < 1000 or u.w > 7 * 86400 * 1000000::bigint) then
        raise exception 'dedup_claim: a dedup id is 1 to 512 bytes, with a key, a count of 1 or more, and a window from 1 millisecond to 7 days'
              using errcode = '22023';
    end if;
    if (select count(distinct u.id) from unnest(p_ids) u(id)) <> v_n then
        raise exception 'dedup_claim: the dedup ids must be distinct' using errcode = '22023';
    end if;
    select c.dedup_window into v_window from partitionq.queue_config c where c.queue = p_queue;
    v_window := coalesce(v_window, interval '1 hour');
    if not coalesce(p_upsert, true) then
        insert into partitionq.dedup (queue, dedup_id, key, sent_at, expires_at, hits, last_hit_at)
        select p_queue, u.id, u.k, v_now, v_now + coalesce(u.w * interval '1 microsecond', v_window), u.c - 1,
               case when u.c > 1 then v_now end
          from unnest(p_ids, p_keys, p_counts, p_windows_us) with ordinality u(id, k, c, w, n)
         order by u.n;
        return query select u.id, true, null::bigint, u.k from unnest(p_ids, p_keys) u(id, k);
        return;
    end if;
    return query
    with ins as (
        insert into partitionq.dedup as d (queue, dedup_id, key, sent_at, expires_at, hits, last_hit_at)
        select p_queue, u.id, u.k, v_now, v_now + coalesce(u.w * interval '1 microsecond', v_window), u.c - 1,
               case when u.c > 1 then v_now end
          from unnest(p_ids, p_keys, p_counts, p_windows_us) with ordinality u(id, k, c, w, n)
         order by u.n
            on conflict on constraint dedup_pkey do update set
               ev_id       = case when d.ev_id is not null and d.expires_at > v_now then d.ev_id end,
               key         = case when d.ev_id is not null and d.expires_at > v_now then d.key else excluded.key end,
               sent_at     = case when d.ev_id is not null and d.expires_at > v_now then d.sent_at else excluded.sent_at end,
               expires_at  = case when d.ev_id is not null and d.expires_at > v_now then d.expires_at else excluded.expires_at end,
               hits        = case when d.ev_id is not null and d.expires_at > v_now then d.hits + excluded.hits + 1 else excluded.hits end,
               last_hit_at = case when d.ev_id is not null and d.expires_at > v_now then v_now else excluded.last_hit_at end
        returning d.dedup_id, d.ev_id is null, d.ev_id, d.key)
    select * from ins;
end
$f$;
revoke all on function partitionq.dedup_claim(text, text[], text[], int[], bigint[], boolean) from public;
