-- Version 6: send once. Dedup records (partitionq.dedup), one per (queue,
-- dedup id) sent within its window, claimed and recorded only through
-- dedup_claim and dedup_record (SECURITY DEFINER, search_path pinned;
-- docs/security.md); each queue's dedup window (partitionq.queue_config);
-- expired records removed in bounded work by expire_dedup (the ticker's
-- maintenance, or a call of its own under pgqd; docs/operations.md).

-- Settings of a queue that partitionq keeps (the engine's are the engine's):
-- its dedup window. No row: the default (an hour). Written by setup (the owner).
create table if not exists partitionq.queue_config (
    queue        text     primary key,
    dedup_window interval not null
);

-- One row per (queue, dedup id) sent within its window. ev_id is the event
-- first sent with it; it is null only inside the sending transaction,
-- between the claim and the record (a row committed without one, which only
-- a hand-made call can leave, is claimed again by the next send). hits
-- counts the duplicates refused (in committed sends), last_hit_at the last.
-- A row past expires_at is removed by expire_dedup (or claimed again).
-- Half of each page is left free, so that the record of a claim (ev_id set,
-- no indexed column changed) is a heap-only update on the claim's page.
create table if not exists partitionq.dedup (
    queue       text        not null,
    dedup_id    text        not null,
    key         text        not null,
    ev_id       bigint,
    sent_at     timestamptz not null,
    expires_at  timestamptz not null,
    hits        bigint      not null default 0,
    last_hit_at timestamptz,
    primary key (queue, dedup_id)
) with (fillfactor = 50);
-- expire_dedup's walk, oldest first.
create index if not exists dedup_expires_at on partitionq.dedup (expires_at);
-- A key's records that refused duplicates (Client.Key): rows enter it on
-- their first hit, so the sends themselves do not write it.
create index if not exists dedup_hits on partitionq.dedup (queue, key, last_hit_at) where hits > 0;

-- The events among p_ev_ids of queue p_queue that the current transaction
-- inserted, with their keys: engine_own_event for many (not SECURITY
-- DEFINER, granted to nobody: dedup_record calls it). It reads the
-- transaction's events through the event tables' ev_txid index.
create or replace function partitionq.engine_own_events(p_engine text, p_queue text, p_ev_ids bigint[])
returns table (ev_id bigint, ev_key text)
language plpgsql stable set search_path = pg_catalog, pg_temp as $f$
declare
    v_pfx text;
begin
    if p_engine is null or p_engine not in ('pgq', 'pgque') then
        raise exception 'unknown engine schema %: pgq or pgque', p_engine using errcode = '22023';
    end if;
    execute format('select queue_data_pfx from %I.queue where queue_name = $1', p_engine) into v_pfx using p_queue;
    if v_pfx is null then
        return;
    end if;
    -- ev_txid is the inserting transaction's (PgQ: bigint, PgQue: xid8),
    -- the top-level one also for inserts made in a savepoint.
    return query execute format('select e.ev_id, e.ev_extra1 from %s e where e.ev_txid = %s and e.ev_id = any($1)', v_pfx,
         case p_engine when 'pgq' then 'txid_current()' else 'pg_current_xact_id()' end)
        using p_ev_ids;
end
$f$;
revoke all on function partitionq.engine_own_events(text, text, bigint[]) from public;

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

-- A send records the events it inserted for the dedup ids it claimed:
-- p_ev_ids[i] for p_ids[i]. Each id must be claimed and not yet recorded,
-- and each event inserted into queue p_queue by the current transaction
-- with the claim's key (PQ002 otherwise); returns the count. The records
-- are found through the primary key alone (dedup_id = any), whatever the
-- table's statistics say of ev_id; the pairs are looked up in jsonb maps.
create or replace function partitionq.dedup_record(p_engine text, p_queue text, p_ids text[], p_ev_ids bigint[])
returns int language plpgsql security definer set search_path = pg_catalog, partitionq, pg_temp as $f$
declare
    v_n    int := coalesce(cardinality(p_ids), 0);
    v_ev   jsonb; -- dedup id -> event id
    v_key  jsonb; -- event id -> its key, for the events this transaction inserted
    v_done text[];
    v_bad  text;
begin
    if p_queue is null or coalesce(cardinality(p_ev_ids), 0) <> v_n then
        raise exception 'dedup_record needs a queue and one event per dedup id' using errcode = '22023';
    end if;
    if v_n = 0 then
        return 0;
    end if;
    select jsonb_object_agg(u.id, u.ev) into v_ev from unnest(p_ids, p_ev_ids) u(id, ev);
    select coalesce(jsonb_object_agg(e.ev_id::text, coalesce(e.ev_key, '')), '{}') into v_key
      from partitionq.engine_own_events(p_engine, p_queue, p_ev_ids) e;
    with upd as (
        update partitionq.dedup d set ev_id = (v_ev ->> d.dedup_id)::bigint
         where d.queue = p_queue and d.dedup_id = any(p_ids) and d.ev_id is null
           and d.key = v_key ->> (v_ev ->> d.dedup_id)
        returning d.dedup_id)
    select array_agg(upd.dedup_id) into v_done from upd;
    if coalesce(cardinality(v_done), 0) <> v_n then
        select u.id into v_bad from unnest(p_ids) u(id) where u.id <> all(coalesce(v_done, '{}')) limit 1;
        raise exception 'dedup id % of queue % is not this transaction''s to record: a send claims it (dedup_claim), inserts its event with the claim''s key, then records it, in one transaction',
              coalesce(v_bad, '(repeated)'), p_queue using errcode = 'PQ002';
    end if;
    return v_n;
end
$f$;

-- Deletes up to p_limit expired dedup records, oldest first, skipping rows
-- a send holds; returns how many. Bounded work: call it again while it
-- returns p_limit. partitionq's ticker does (docs/operations.md); under
-- pgqd, run it from cron.
create or replace function partitionq.expire_dedup(p_limit int default 5000)
returns int language plpgsql security definer set search_path = pg_catalog, partitionq, pg_temp as $f$
declare
    v_n int;
begin
    if p_limit is null or p_limit < 1 then
        raise exception 'expire_dedup deletes at most p_limit records: give 1 or more' using errcode = '22023';
    end if;
    delete from partitionq.dedup
     where ctid = any(array(select x.ctid from partitionq.dedup x
                             where x.expires_at <= statement_timestamp()
                             order by x.expires_at limit p_limit
                               for update skip locked));
    get diagnostics v_n = row_count;
    return v_n;
end
$f$;

revoke all on function partitionq.dedup_claim(text, text[], text[], int[], bigint[], boolean) from public;
revoke all on function partitionq.dedup_record(text, text, text[], bigint[]) from public;
revoke all on function partitionq.expire_dedup(int) from public;
