-- Version 7: what became of an event an operator named (event_fate), for
-- actions that tell the truth; the census of each queue's ticks by slot,
-- for each slot's pending events at any backlog (census, group_backlog).
-- All read the engine's event tables through functions of the owner's, so
-- that the viewer and the operator need no right on them (payloads).

-- What became of event p_ev_id for slot consumer p_consumer of queue
-- p_queue, as far as the engine's tables tell, without its payload:
--   'set_aside'   it is in the consumer's retry queue (parked, or a timed retry)
--   'finished'    it is in the event tables, and the consumer's last finished
--                 tick includes it: handled (it is neither set aside nor, the
--                 caller checks, a dead letter)
--   'unfinished'  it is in the event tables, after the consumer's position
--   'other_key'   it is an event of another key than p_key
--   'no_event'    the queue never had it (its id is past the queue's newest),
--                 or its ticks hold no such event
--   'unknown'     older than every tick the engine keeps (rotated away)
--   'no_consumer' no such consumer of the queue
-- The event is looked up by ev_id within the transactions that can hold it:
-- its transaction had not committed at the last tick before the id was
-- handed out (tick_event_seq < id), so its txid is at least that tick's
-- xmin; and it had started at the first tick after (tick_event_seq >= id),
-- so its txid is below that tick's xmax. Those bounds use the event
-- tables' txid index: the cost is the events of a few ticks, whatever the
-- backlog.
create or replace function partitionq.event_fate(p_engine text, p_queue text, p_consumer text, p_key text, p_ev_id bigint)
returns text language plpgsql stable security definer set search_path = pg_catalog, partitionq, pg_temp as $f$
declare
    v_qid   int;
    v_pfx   text;
    v_seq   text;
    v_sub   int;
    v_last  bigint;
    v_lo    text;
    v_hi    text;
    v_key   text;
    v_done  boolean;
    v_head  bigint;
    v_rows  bigint;
    v_xmin  text := case p_engine when 'pgq' then 'txid_snapshot_xmin' else 'pg_snapshot_xmin' end;
    v_xmax  text := case p_engine when 'pgq' then 'txid_snapshot_xmax' else 'pg_snapshot_xmax' end;
    v_vis   text := case p_engine when 'pgq' then 'txid_visible_in_snapshot' else 'pg_visible_in_snapshot' end;
begin
    if p_engine is null or p_engine not in ('pgq', 'pgque') then
        raise exception 'unknown engine schema %: pgq or pgque', p_engine using errcode = '22023';
    end if;
    execute format('select q.queue_id, q.queue_data_pfx, q.queue_event_seq, s.sub_id, s.sub_last_tick
          from %1$I.queue q join %1$I.subscription s on s.sub_queue = q.queue_id
          join %1$I.consumer c on c.co_id = s.sub_consumer
         where q.queue_name = $1 and c.co_name = $2', p_engine)
        into v_qid, v_pfx, v_seq, v_sub, v_last using p_queue, p_consumer;
    if v_qid is null then
        return 'no_consumer';
    end if;
    execute format('select ev_extra1 from %I.retry_queue where ev_owner = $1 and ev_id = $2', p_engine)
        into v_key using v_sub, p_ev_id;
    get diagnostics v_rows = row_count; -- EXECUTE sets no FOUND
    if v_rows > 0 then
        return case when v_key is not distinct from p_key then 'set_aside' else 'other_key' end;
    end if;
    execute format('select last_value from %s', v_seq) into v_head;
    if p_ev_id < 1 or p_ev_id > v_head then
        return 'no_event';
    end if;
    -- (The queue's first tick, made by create_queue before any event, has
    -- the sequence's start as its tick_event_seq: no id was handed out.)
    execute format('select %2$s(tick_snapshot)::text from %1$I.tick where tick_queue = $1
           and case when tick_id = 1 then 0 else tick_event_seq end < $2
         order by tick_id desc limit 1', p_engine, v_xmin) into v_lo using v_qid, p_ev_id;
    if v_lo is null then
        return 'unknown';
    end if;
    execute format('select %2$s(tick_snapshot)::text from %1$I.tick where tick_queue = $1
           and case when tick_id = 1 then 0 else tick_event_seq end >= $2
         order by tick_id limit 1', p_engine, v_xmax) into v_hi using v_qid, p_ev_id;
    execute format('select e.ev_extra1, %3$s(e.ev_txid, t.tick_snapshot)
          from %1$s e, %2$I.tick t
         where t.tick_queue = $4 and t.tick_id = $5
           and e.ev_txid >= $1::text::%4$s and ($2 is null or e.ev_txid < $2::text::%4$s) and e.ev_id = $3
           and (e.ev_owner is null or e.ev_owner = $6)
         limit 1', v_pfx, p_engine, v_vis, case p_engine when 'pgq' then 'bigint' else 'xid8' end)
        into v_key, v_done using v_lo, v_hi, p_ev_id, v_qid, v_last, v_sub;
    get diagnostics v_rows = row_count;
    if v_rows = 0 then
        return 'no_event';
    end if;
    if v_key is distinct from p_key then
        return 'other_key';
    end if;
    return case when v_done then 'finished' else 'unfinished' end;
end
$f$;
revoke all on function partitionq.event_fate(text, text, text, text, bigint) from public;

-- ------------------------------------------------------ the slot census
-- How many events of each slot's share every tick range holds, counted
-- once per (queue, N) as ticks come, so that a slot's pending events cost
-- a few row reads whatever the backlog (docs/operations.md, "Exact pending
-- events and what they cost"). One row per tick from the position of the
-- slowest slot of any group of N slots on the queue: counts[s + 1] is the
-- number of events of slot s (keyed or not, ev_owner null) committed from
-- the census's base tick up to this tick (cumulative); firsts[s + 1] the
-- oldest ev_time among slot s's events of the range that ends at this tick
-- (null: none); owned the cumulative count of events re-inserted for one
-- consumer (ev_owner, by sub_id: the engine's timed retries), as a map.
create table if not exists partitionq.census (
    queue   text          not null,
    n       int           not null,
    tick_id bigint        not null,
    counts  int8[]        not null,
    firsts  timestamptz[] not null,
    owned   jsonb         not null default '{}',
    primary key (queue, n, tick_id)
);
-- Where the census of (queue, N) stands: its base tick and the newest tick
-- it has counted; the row is locked while a session counts.
create table if not exists partitionq.census_state (
    queue   text   not null,
    n       int    not null,
    base    bigint not null,
    tick_id bigint not null,
    primary key (queue, n)
);

-- The engine's names of one engine's snapshot functions and types.
create or replace function partitionq.engine_snap(p_engine text, out vis text, out xmin text, out xmax text, out snap text, out xid text)
language sql immutable set search_path = pg_catalog, pg_temp as $f$
    select case p_engine when 'pgq' then 'txid_visible_in_snapshot' else 'pg_visible_in_snapshot' end,
           case p_engine when 'pgq' then 'txid_snapshot_xmin' else 'pg_snapshot_xmin' end,
           case p_engine when 'pgq' then 'txid_snapshot_xmax' else 'pg_snapshot_xmax' end,
           case p_engine when 'pgq' then 'txid_snapshot' else 'pg_snapshot' end,
           case p_engine when 'pgq' then 'bigint' else 'xid8' end
$f$;
revoke all on function partitionq.engine_snap(text) from public;

-- Counts the tick ranges of queue p_queue not counted yet for groups of
-- p_n slots, oldest first, until about p_budget events are counted (one
-- range at least; a range is counted whole), and drops the rows no slot
-- needs any more. Returns the events counted, or -1 when another session
-- is counting (it returns at once). Reads the event tables as the owner:
-- callers need no right on them, and get counts only.
create or replace function partitionq.census(p_engine text, p_queue text, p_n int, p_budget bigint)
returns bigint language plpgsql security definer set search_path = pg_catalog, partitionq, pg_temp as $f$
declare
    e       record := partitionq.engine_snap(p_engine);
    v_qid   int;
    v_pfx   text;
    v_min   bigint;
    v_state record;
    v_prev  record;
    v_cur   record;
    v_r     record;
    v_done  bigint := 0;
    v_counts int8[];
    v_firsts timestamptz[];
    v_owned jsonb;
    v_sql   text;
begin
    if p_engine is null or p_engine not in ('pgq', 'pgque') then
        raise exception 'unknown engine schema %: pgq or pgque', p_engine using errcode = '22023';
    end if;
    if p_n is null or p_n < 1 or p_n > 100000 or p_budget is null or p_budget < 1 then
        raise exception 'census of % slots with a budget of %: give 1 slot or more and a positive budget', p_n, p_budget using errcode = '22023';
    end if;
    execute format('select queue_id, queue_data_pfx from %I.queue where queue_name = $1', p_engine) into v_qid, v_pfx using p_queue;
    if v_qid is not null then
        execute format('select min(s.sub_last_tick) from %1$I.subscription s join %1$I.consumer c on c.co_id = s.sub_consumer
             where s.sub_queue = $1 and c.co_name ~ (''^.+#[0-9]+/'' || $2 || ''$'')', p_engine) into v_min using v_qid, p_n;
    end if;
    if v_min is null then -- no group of N slots on the queue (any more)
        delete from partitionq.census where queue = p_queue and n = p_n;
        delete from partitionq.census_state where queue = p_queue and n = p_n;
        return 0;
    end if;
    insert into partitionq.census_state (queue, n, base, tick_id) values (p_queue, p_n, v_min, v_min) on conflict do nothing;
    select * into v_state from partitionq.census_state where queue = p_queue and n = p_n for update skip locked;
    if not found then
        return -1;
    end if;
    if v_state.base > v_min or v_state.tick_id < v_min then
        -- A slot stands before the census's base (repositioned), or every
        -- slot has passed where it stands: count afresh from the slowest.
        delete from partitionq.census where queue = p_queue and n = p_n;
        update partitionq.census_state set base = v_min, tick_id = v_min where queue = p_queue and n = p_n;
        v_state.base := v_min;
        v_state.tick_id := v_min;
    end if;
    select counts, owned into v_counts, v_owned from partitionq.census where queue = p_queue and n = p_n and tick_id = v_state.tick_id;
    if v_counts is null then
        v_counts := array_fill(0::int8, array[p_n]);
        v_owned := '{}';
        insert into partitionq.census values (p_queue, p_n, v_state.tick_id, v_counts, array_fill(null::timestamptz, array[p_n]), v_owned);
    end if;
    execute format('select tick_id, tick_snapshot::text as snap, case when tick_id = 1 then 0 else tick_event_seq end as seq
          from %I.tick where tick_queue = $1 and tick_id = $2', p_engine) into v_prev using v_qid, v_state.tick_id;
    if v_prev.tick_id is null then
        return 0; -- its tick is gone: the next call counts afresh from the slowest slot
    end if;
    v_sql := format($q$
        with x as (
            select ev_txid, (case when ev_extra1 is null then 0 else (hashtextextended(ev_extra1, 0) %% $1 + $1) %% $1 end)::int as slot,
                   ev_owner, count(*) as c, min(ev_time) as t
              from %1$s where ev_txid >= %2$s($2::%4$s) and ev_txid < %3$s($3::%4$s) group by 1, 2, 3)
        select slot, ev_owner, sum(c)::int8 as c, min(t) as t from x
         where %5$s(ev_txid, $3::%4$s) and not %5$s(ev_txid, $2::%4$s) group by 1, 2$q$,
        v_pfx, e.xmin, e.xmax, e.snap, e.vis);
    for v_cur in execute format('select tick_id, tick_snapshot::text as snap, tick_event_seq as seq
          from %I.tick where tick_queue = $1 and tick_id > $2 order by tick_id', p_engine) using v_qid, v_prev.tick_id loop
        exit when v_done > 0 and v_done + (v_cur.seq - v_prev.seq) > p_budget;
        v_firsts := array_fill(null::timestamptz, array[p_n]);
        for v_r in execute v_sql using p_n, v_prev.snap, v_cur.snap loop
            if v_r.ev_owner is null then
                v_counts[v_r.slot + 1] := v_counts[v_r.slot + 1] + v_r.c;
                v_firsts[v_r.slot + 1] := least(v_firsts[v_r.slot + 1], v_r.t);
            else
                v_owned := jsonb_set(v_owned, array[v_r.ev_owner::text],
                                     to_jsonb(coalesce((v_owned ->> v_r.ev_owner::text)::int8, 0) + v_r.c));
            end if;
            v_done := v_done + v_r.c;
        end loop;
        insert into partitionq.census values (p_queue, p_n, v_cur.tick_id, v_counts, v_firsts, v_owned);
        v_prev := v_cur;
    end loop;
    update partitionq.census_state set tick_id = v_prev.tick_id where queue = p_queue and n = p_n;
    delete from partitionq.census where queue = p_queue and n = p_n and tick_id < v_min;
    return v_done;
end
$f$;
revoke all on function partitionq.census(text, text, int, bigint) from public;

-- The census of every (queue, N) of the database's groups, each until
-- about p_budget events: what the ticker runs after its ticks.
create or replace function partitionq.census_all(p_engine text, p_budget bigint)
returns bigint language plpgsql security definer set search_path = pg_catalog, partitionq, pg_temp as $f$
declare
    v_r    record;
    v_done bigint := 0;
begin
    if p_engine is null or p_engine not in ('pgq', 'pgque') then
        raise exception 'unknown engine schema %: pgq or pgque', p_engine using errcode = '22023';
    end if;
    for v_r in execute format('select distinct q.queue_name as queue, substring(c.co_name from ''#[0-9]+/([0-9]+)$'')::int as n
          from %1$I.subscription s join %1$I.consumer c on c.co_id = s.sub_consumer join %1$I.queue q on q.queue_id = s.sub_queue
         where c.co_name ~ ''^.+#[0-9]+/[0-9]{1,6}$''
        union select queue, n from partitionq.census_state', p_engine) loop
        v_done := v_done + greatest(partitionq.census(p_engine, v_r.queue, v_r.n, p_budget), 0);
    end loop;
    return v_done;
end
$f$;
revoke all on function partitionq.census_all(text, bigint) from public;

-- Every slot's pending events of group p_group of queue p_queue: the
-- events of its share after the last tick it finished (keyless or its own
-- retried ones), less what the recorded progress of its open batch marks
-- resolved (p_batch, p_below per slot; p_done_slots, p_done_ids the ids
-- above the watermark), and the age of the oldest of them. Three parts:
-- the tick ranges the census has counted (two row reads per slot), the
-- events after the census's newest tick (one scan of the event tables,
-- through their txid index, of at most p_budget events), and each open
-- batch with recorded progress (one scan of those batches' range). When
-- the scan after the census stops at its budget (the census is far behind:
-- no tick for long, or it has just started), pending is what was counted
-- and pending_max adds the events sent after that point (from the queue's
-- event sequence), so the true count lies between them; else both are the
-- exact count. Counts only: the caller needs no right on the event tables.
create or replace function partitionq.group_backlog(p_engine text, p_queue text, p_group text, p_n int,
    p_batch int8[], p_below int8[], p_done_slots int4[], p_done_ids int8[], p_budget bigint)
returns table (slot int, pending bigint, pending_max bigint, oldest interval)
language plpgsql stable security definer set search_path = pg_catalog, partitionq, pg_temp as $f$
declare
    e        record := partitionq.engine_snap(p_engine);
    v_qid    int;
    v_pfx    text;
    v_head   bigint;
    v_n      int := p_n;
    v_i      int;
    v_found  int := 0;
    v_state  record;
    v_hcounts int8[];
    v_howned  jsonb;
    v_fcounts int8[];
    v_fowned  jsonb;
    v_r      record;
    v_subs   int4[];
    v_tsnap  text[];
    v_tseq   int8[];
    v_lsnap  text[];
    v_bsnap  text[];
    v_below  int8[];
    v_open   boolean[];
    v_count  int8[];
    v_oldest timestamptz[];
    v_minseq int8;
    v_extra  int8 := 0;
    v_scan   int8;
    v_slot   text;
    v_ft     bigint;
    v_fsnap  text;
    v_fseq   int8;
    v_ts     text;
    v_tq     int8;
    v_first  timestamptz;
begin
    if p_engine is null or p_engine not in ('pgq', 'pgque') then
        raise exception 'unknown engine schema %: pgq or pgque', p_engine using errcode = '22023';
    end if;
    execute format('select queue_id, queue_data_pfx, coalesce(pg_sequence_last_value(queue_event_seq::regclass), 0)
          from %I.queue where queue_name = $1', p_engine) into v_qid, v_pfx, v_head using p_queue;
    if v_qid is null then
        return;
    end if;
    if p_n is null or p_n < 1 then
        raise exception 'the backlog of a generation of % slots: give 1 or more', p_n using errcode = '22023';
    end if;
    -- The generation's slots (of N = p_n), in slot order; during a resize
    -- some have no consumer (not registered yet, or handed off): none counted.
    for i in 1 .. v_n loop
        v_subs[i] := 0;
        v_open[i] := false;
        v_count[i] := 0;
    end loop;
    for v_r in execute format($q$select substring(c.co_name from '#([0-9]+)/')::int as slot,
                 substring(c.co_name from '/([0-9]+)$')::int as n, s.sub_id, s.sub_last_tick, s.sub_batch, s.sub_next_tick,
                 lt.tick_snapshot::text as lsnap, case when lt.tick_id = 1 then 0 else lt.tick_event_seq end as lseq,
                 nt.tick_snapshot::text as bsnap, nt.tick_event_seq as bseq
            from %1$I.subscription s join %1$I.consumer c on c.co_id = s.sub_consumer
            join %1$I.tick lt on lt.tick_queue = s.sub_queue and lt.tick_id = s.sub_last_tick
            left join %1$I.tick nt on nt.tick_queue = s.sub_queue and nt.tick_id = s.sub_next_tick
           where s.sub_queue = $1 and starts_with(c.co_name, $2 || '#') and c.co_name ~ ('#[0-9]+/' || $3 || '$')
           order by 1$q$, p_engine) using v_qid, p_group, p_n loop
        if v_r.slot >= v_n then
            raise exception 'consumer of slot % of group % of queue % has no place among % slots', v_r.slot, p_group, p_queue, v_n
                  using errcode = '22023';
        end if;
        v_i := v_r.slot + 1;
        v_found := v_found + 1;
        v_subs[v_i] := v_r.sub_id;
        v_lsnap[v_i] := v_r.lsnap;
        v_open[v_i] := v_r.sub_batch is not null and v_r.bsnap is not null and coalesce(p_batch[v_i], 0) = v_r.sub_batch;
        v_below[v_i] := case when v_open[v_i] then coalesce(p_below[v_i], 0) else 0 end;
        v_bsnap[v_i] := case when v_open[v_i] then v_r.bsnap end;
        -- From where the slot's events are counted: its last finished tick,
        -- or the end of its open batch when the batch's own events are
        -- counted one by one (its progress is recorded).
        v_ft := case when v_open[v_i] then v_r.sub_next_tick else v_r.sub_last_tick end;
        v_fsnap := case when v_open[v_i] then v_r.bsnap else v_r.lsnap end;
        v_fseq := case when v_open[v_i] then v_r.bseq else v_r.lseq end;
        v_count[v_i] := 0;
        v_oldest[v_i] := null;
        select * into v_state from partitionq.census_state cs where cs.queue = p_queue and cs.n = v_r.n;
        if v_state.tick_id is not null and v_ft >= v_state.base and v_ft <= v_state.tick_id then
            if v_hcounts is null then
                select c.counts, c.owned into v_hcounts, v_howned from partitionq.census c
                 where c.queue = p_queue and c.n = v_r.n and c.tick_id = v_state.tick_id;
            end if;
            v_fcounts := null;
            select c.counts, c.owned into v_fcounts, v_fowned from partitionq.census c
             where c.queue = p_queue and c.n = v_r.n and c.tick_id = v_ft;
            if v_hcounts is not null and v_fcounts is not null then
                v_count[v_i] := v_hcounts[v_i] - v_fcounts[v_i]
                    + coalesce((v_howned ->> v_r.sub_id::text)::int8, 0) - coalesce((v_fowned ->> v_r.sub_id::text)::int8, 0);
                if v_hcounts[v_i] > v_fcounts[v_i] then
                    select c.firsts[v_i] into v_first from partitionq.census c
                     where c.queue = p_queue and c.n = v_r.n and c.tick_id > v_ft and c.tick_id <= v_state.tick_id
                       and c.counts[v_i] > v_fcounts[v_i] order by c.tick_id limit 1;
                    v_oldest[v_i] := v_first;
                end if;
                -- The rest: after the census's newest tick.
                execute format('select tick_snapshot::text, case when tick_id = 1 then 0 else tick_event_seq end from %I.tick
                     where tick_queue = $1 and tick_id = $2', p_engine) into v_ts, v_tq using v_qid, v_state.tick_id;
                v_tsnap[v_i] := v_ts;
                v_tseq[v_i] := v_tq;
            end if;
        end if;
        if v_tsnap[v_i] is null then -- no census of it: everything after its position is counted by the scan
            v_tsnap[v_i] := v_fsnap;
            v_tseq[v_i] := v_fseq;
        end if;
    end loop;
    if v_found = 0 then
        return;
    end if;
    v_slot := '(case when e.ev_extra1 is null then 0 else (hashtextextended(e.ev_extra1, 0) % ' || v_n || ' + ' || v_n || ') % ' || v_n || ' end)';

    -- After the census (or the slot's position): one scan, at most p_budget events.
    v_scan := 0;
    for v_r in execute format($q$
        with s as materialized (
            select (o - 1)::int as slot, sub, snap::%3$s as snap from unnest($1::int4[], $2::text[]) with ordinality u(sub, snap, o)),
        x as materialized (
            select e.ev_txid, %4$s::int as slot, e.ev_owner, e.ev_time from %1$s e
             where e.ev_txid >= (select min(%2$s(snap)) from s) order by e.ev_txid limit $3),
        agg as (select x.slot, x.ev_txid, x.ev_owner, count(*) as n, min(x.ev_time) as t from x group by 1, 2, 3)
        select s.slot, sum(agg.n)::int8 as n, min(agg.t) as t from agg join s on s.slot = agg.slot
         where (agg.ev_owner is null or agg.ev_owner = s.sub) and not %5$s(agg.ev_txid, s.snap) group by s.slot
        union all select -1, (select count(*) from x), null$q$,
        v_pfx, e.xmin, e.snap, v_slot, e.vis) using v_subs, v_tsnap, p_budget loop
        if v_r.slot < 0 then
            v_scan := v_r.n;
        else
            v_count[v_r.slot + 1] := v_count[v_r.slot + 1] + v_r.n;
            v_oldest[v_r.slot + 1] := least(v_oldest[v_r.slot + 1], v_r.t);
        end if;
    end loop;
    if v_scan >= p_budget then
        -- Stopped at the budget: the events sent after the scan's start and
        -- not counted bound what is missing.
        select min(x) into v_minseq from unnest(v_tseq) x;
        v_extra := greatest(v_head - v_minseq - v_scan, 0) + 1;
    end if;

    -- The open batches whose progress is recorded, event by event.
    if true = any(v_open) then
        for v_r in execute format($q$
            with s as materialized (
                select (o - 1)::int as slot, sub, l::%3$s as l, b::%3$s as b, below
                  from unnest($1::int4[], $2::text[], $3::text[], $4::int8[], $5::boolean[]) with ordinality u(sub, l, b, below, open, o)
                 where open),
            done as materialized (select * from unnest($6::int4[], $7::int8[]) d(slot, id))
            select s.slot, count(*)::int8 as n, min(e.ev_time) as t
              from %1$s e join s on s.slot = %5$s
             where e.ev_txid >= (select min(%2$s(l)) from s) and e.ev_txid < (select max(%4$s(b)) from s)
               and (e.ev_owner is null or e.ev_owner = s.sub)
               and %6$s(e.ev_txid, s.b) and not %6$s(e.ev_txid, s.l)
               and e.ev_id > s.below and (s.slot, e.ev_id) not in (select d.slot, d.id from done d)
             group by s.slot$q$,
            v_pfx, e.xmin, e.snap, e.xmax, v_slot, e.vis) using v_subs, v_lsnap, v_bsnap, v_below, v_open,
                coalesce(p_done_slots, '{}'), coalesce(p_done_ids, '{}') loop
            v_count[v_r.slot + 1] := v_count[v_r.slot + 1] + v_r.n;
            v_oldest[v_r.slot + 1] := least(v_oldest[v_r.slot + 1], v_r.t);
        end loop;
    end if;

    for i in 1 .. v_n loop
        continue when v_subs[i] = 0;
        slot := i - 1;
        pending := v_count[i];
        pending_max := v_count[i] + v_extra;
        oldest := case when v_count[i] > 0 then greatest(now() - v_oldest[i], '0') end;
        return next;
    end loop;
end
$f$;
revoke all on function partitionq.group_backlog(text, text, text, int, int8[], int8[], int4[], int8[], bigint) from public;

-- The keys of group p_group with the most pending events (the events of
-- each slot's share after the last tick it finished, keyless ones under
-- the key ''), and for each slot the key of its oldest pending event.
-- Rows of kind:
--   'key'    slot, key, pending, err: the p_top keys with the most pending
--            events, and the busiest key of each slot; err is 0 when
--            counted exactly, else the half-width of a 95% interval of the
--            sampled estimate (pages sampled as clusters: the variance of a
--            ratio estimate between pages)
--   'oldest' slot, key, oldest: the key of the slot's oldest pending event
--            among the first p_window events after its position (by
--            commit order; none when it has no pending event there)
--   'meta'   pending: the events counted or sampled; err: 1 when sampled
-- When the group's pending events (p_total, the caller's Status) are at
-- most p_exact_max, every one is read and counted; else the event tables
-- are sampled by page (TABLESAMPLE SYSTEM), about p_sample events, and
-- each key's count estimated from its share of the sampled pending events
-- times p_total. Counts and keys only: no payload.
create or replace function partitionq.group_keys(p_engine text, p_queue text, p_group text, p_n int,
    p_top int, p_total bigint, p_exact_max bigint, p_sample bigint, p_window bigint)
returns table (kind text, slot int, key text, pending bigint, err bigint, oldest interval)
language plpgsql volatile security definer set search_path = pg_catalog, partitionq, pg_temp as $f$
declare
    e       record := partitionq.engine_snap(p_engine);
    v_qid   int;
    v_pfx   text;
    v_n     int := p_n;
    v_found int := 0;
    v_subs  int4[];
    v_snaps text[];
    v_r     record;
    v_slot  text;
    v_from  text;
    v_rows  float8;
    v_pct   float8;
    v_exact boolean := p_total <= p_exact_max;
begin
    if p_engine is null or p_engine not in ('pgq', 'pgque') then
        raise exception 'unknown engine schema %: pgq or pgque', p_engine using errcode = '22023';
    end if;
    if p_top is null or p_top < 1 or p_top > 10000 then
        raise exception 'top % keys: give 1 to 10000', p_top using errcode = '22023';
    end if;
    execute format('select queue_id, queue_data_pfx from %I.queue where queue_name = $1', p_engine) into v_qid, v_pfx using p_queue;
    if v_qid is null then
        return;
    end if;
    for v_r in execute format($q$select substring(c.co_name from '#([0-9]+)/')::int as slot, s.sub_id, t.tick_snapshot::text as snap
            from %1$I.subscription s join %1$I.consumer c on c.co_id = s.sub_consumer
            join %1$I.tick t on t.tick_queue = s.sub_queue and t.tick_id = s.sub_last_tick
           where s.sub_queue = $1 and starts_with(c.co_name, $2 || '#') and c.co_name ~ ('#[0-9]+/' || $3 || '$')
           order by 1$q$, p_engine) using v_qid, p_group, p_n loop
        continue when v_r.slot >= v_n;
        v_found := v_found + 1;
        v_subs[v_r.slot + 1] := v_r.sub_id;
        v_snaps[v_r.slot + 1] := v_r.snap;
    end loop;
    if v_found = 0 then
        return;
    end if;
    for i in 1 .. v_n loop -- slots without a consumer (a resize in flight) count nothing
        v_subs[i] := coalesce(v_subs[i], 0);
    end loop;
    v_slot := '(case when e.ev_extra1 is null then 0 else (hashtextextended(e.ev_extra1, 0) % ' || v_n || ' + ' || v_n || ') % ' || v_n || ' end)';
    v_from := v_pfx || ' e';
    if not v_exact then
        -- Pages to sample: about p_sample events of the queue's tables.
        select coalesce(sum(greatest(c.reltuples, 0)), 0) into v_rows from pg_catalog.pg_inherits i
          join pg_catalog.pg_class c on c.oid = i.inhrelid where i.inhparent = v_pfx::regclass;
        v_pct := least(100, greatest(0.01, 100.0 * p_sample / greatest(v_rows, 1)));
        v_from := v_pfx || ' e tablesample system (' || v_pct || ')';
    end if;
    return query execute format($q$
        with s as materialized (
            select (o - 1)::int as slot, sub, snap::%3$s as snap from unnest($1::int4[], $2::text[]) with ordinality u(sub, snap, o)),
        ev as materialized (
            select s.slot, coalesce(e.ev_extra1, '') as key, (e.ctid::text::point)[0]::int8 as page
              from %1$s join s on s.slot = %4$s
             where e.ev_txid >= (select min(%2$s(snap)) from s)
               and (e.ev_owner is null or e.ev_owner = s.sub) and not %5$s(e.ev_txid, s.snap)),
        kp as materialized (select slot, key, page, count(*)::float8 as y from ev group by 1, 2, 3),
        px as materialized (select page, sum(y) as x from kp group by 1),
        m as (select coalesce(sum(x), 0) as n, count(*)::float8 as pages, coalesce(sum(x * x), 0) as xx from px),
        k as (select kp.slot, kp.key, sum(kp.y) as y from kp group by 1, 2),
        est as (
            select k.slot, k.key, k.y,
                   case when $3 then k.y else k.y / greatest(m.n, 1) * $4 end as pending
              from k, m),
        err as (
            -- The larger of two standard errors of the key's share R = sum
            -- y / sum x: sampled pages as clusters (y_b the key's events in
            -- page b, x_b the page's: var(R) = sum_b (y_b - R x_b)^2 / (pages
            -- (pages - 1) mean(x)^2), over every sampled page, those without
            -- the key too), and the events as if drawn one by one
            -- (R (1 - R) / n): neither alone is safe on every layout.
            select kp.slot, kp.key,
                   greatest(
                     sqrt(greatest(sum(kp.y * kp.y - 2 * (k.y / m.n) * kp.y * px.x) + (k.y / m.n) ^ 2 * m.xx, 0)
                          / greatest(m.pages * (m.pages - 1), 1)) / greatest(m.n / m.pages, 1),
                     sqrt((k.y / m.n) * (1 - k.y / m.n) / m.n)) as se
              from kp join px using (page) join k using (slot, key) cross join m
             where m.n > 0
             group by kp.slot, kp.key, k.y, m.n, m.pages, m.xx),
        ranked as (
            select est.*, coalesce(err.se, 0) as se,
                   row_number() over (order by est.pending desc, est.key) as overall,
                   row_number() over (partition by est.slot order by est.pending desc, est.key) as in_slot
              from est left join err using (slot, key))
        select 'key'::text, slot, key, round(pending)::int8,
               case when $3 then 0 else ceil(1.96 * se * $4)::int8 end, null::interval
          from ranked where overall <= $5 or in_slot = 1
        union all
        select 'meta', null, null, (select n from m)::int8, case when $3 then 0 else 1 end, null$q$,
        v_from, e.xmin, e.snap, v_slot, e.vis) using v_subs, v_snaps, v_exact, p_total, p_top;
    -- The oldest pending event of each slot, among the first p_window
    -- events after the slowest position.
    return query execute format($q$
        with s as materialized (
            select (o - 1)::int as slot, sub, snap::%3$s as snap from unnest($1::int4[], $2::text[]) with ordinality u(sub, snap, o)),
        ev as (select e.ev_txid, e.ev_owner, e.ev_time, e.ev_extra1 from %1$s e
                where e.ev_txid >= (select min(%2$s(snap)) from s) order by e.ev_txid limit $3)
        select distinct on (s.slot) 'oldest'::text, s.slot, coalesce(ev.ev_extra1, ''), null::int8, null::int8, greatest(now() - ev.ev_time, '0')
          from ev join s on s.slot = %4$s
         where (ev.ev_owner is null or ev.ev_owner = s.sub) and not %5$s(ev.ev_txid, s.snap)
         order by s.slot, ev.ev_time$q$,
        v_pfx, e.xmin, e.snap, replace(v_slot, 'e.', 'ev.'), e.vis) using v_subs, v_snaps, p_window;
end
$f$;
revoke all on function partitionq.group_keys(text, text, text, int, int, bigint, bigint, bigint, bigint) from public;
