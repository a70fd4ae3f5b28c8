-- Counts the tick ranges of queue p_queue not counted yet for groups of
-- p_n slots, oldest first, until about p_budget events are counted (one
-- range at least; a range is counted whole), and drops the rows no slot
-- needs any more. Returns the events counted, or -1 when another session
-- is counting (it returns at once). Reads the event tables as the owner:
-- callers need no right on them, and get counts only.
--
-- The ranges of a call are chosen first (oldest first, until about
-- p_budget events by the ticks' event sequence), and one statement reads
-- them all, each range through the event tables' txid index. The slowest
-- consumer of a group is found by looking up each consumer's subscription
-- row by its key (a scan of the engine's subscription table reads the
-- dead versions of its many updates).
create or replace function partitionq.census(p_engine text, p_queue text, p_n int, p_budget bigint)
returns bigint language plpgsql security definer set search_path = pg_catalog, partitionq, pg_temp as $f$
declare
    e        record := partitionq.engine_snap(p_engine);
    v_qid    int;
    v_pfx    text;
    v_min    bigint;
    v_state  record;
    v_prev   record;
    v_ticks  bigint[];
    v_snaps  text[];
    v_k      int := 0;
    v_i      int;
    v_j      int := 1;
    v_at     int[];
    v_slot   int[];
    v_owner  int8[];
    v_c      int8[];
    v_t      timestamptz[];
    v_done   bigint := 0;
    v_counts int8[];
    v_firsts timestamptz[];
    v_owned  jsonb;
begin
    if p_engine is null or p_engine not in ('pgq', 'pgque') then
        raise exception 'unknown engine schema %: pgq or pgque', p_engine using errcode = '22023';
    end if;
    if p_n is null or p_n < 1 or p_n > 100000 or p_budget is null or p_budget < 1 then
        raise exception 'census of % slots with a budget of %: give 1 slot or more and a positive budget', p_n, p_budget using errcode = '22023';
    end if;
    execute format('select queue_id, queue_data_pfx from %I.queue where queue_name = $1', p_engine) into v_qid, v_pfx using p_queue;
    if v_qid is not null then
        -- Each consumer's row looked up by its key: the engine updates these
        -- rows on every batch, and a scan of the table (what the planner
        -- chose once a vacuum had counted its rows) read every dead version.
        execute format('select min(s.sub_last_tick) from %1$I.consumer c
             cross join lateral (select s.sub_last_tick from %1$I.subscription s
                                  where s.sub_queue = $1 and s.sub_consumer = c.co_id offset 0) s
             where c.co_name ~ (''^.+#[0-9]+/'' || $2 || ''$'')', p_engine) into v_min using v_qid, p_n;
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
    -- The ranges this call counts: the ticks after the census's newest,
    -- oldest first, while their events (by the queue's event sequence) stay
    -- within the budget, one at least.
    execute format($q$
        with t as (
            select tick_id, tick_snapshot::text as snap, tick_event_seq - $3 as upto
              from %I.tick where tick_queue = $1 and tick_id > $2)
        select array_agg(tick_id order by tick_id), array_agg(snap order by tick_id)
          from t where upto <= $4 or tick_id = (select min(tick_id) from t)$q$, p_engine)
        into v_ticks, v_snaps using v_qid, v_prev.tick_id, v_prev.seq, p_budget;
    v_k := coalesce(array_length(v_ticks, 1), 0);
    if v_k > 0 then
        -- Every event of the ranges, grouped by range, slot and owner: one
        -- statement, each range read through the event tables' txid index.
        execute format($q$
            with t as (select i::int as i, p::%4$s as prev, c::%4$s as cur from unnest($2::text[], $3::text[]) with ordinality u(p, c, i))
            select array_agg(i order by i), array_agg(slot order by i), array_agg(ev_owner order by i),
                   array_agg(c order by i), array_agg(t order by i)
              from (select t.i, x.slot, x.ev_owner, sum(x.c)::int8 as c, min(x.t) as t
                      from t cross join lateral (
                           select ev_txid, (case when ev_extra1 is null then 0 else (hashtextextended(ev_extra1, 0) %% $1 + $1) %% $1 end)::int as slot,
                                  ev_owner, count(*) as c, min(ev_time) as t
                             from %1$s where ev_txid >= %2$s(t.prev) and ev_txid < %3$s(t.cur) group by 1, 2, 3) x
                     where %5$s(x.ev_txid, t.cur) and not %5$s(x.ev_txid, t.prev)
                     group by 1, 2, 3) z$q$,
            v_pfx, e.xmin, e.xmax, e.snap, e.vis)
            into v_at, v_slot, v_owner, v_c, v_t using p_n, array[v_prev.snap] || v_snaps[1:v_k - 1], v_snaps;
    end if;
    for v_i in 1 .. v_k loop
        v_firsts := array_fill(null::timestamptz, array[p_n]);
        while v_j <= coalesce(array_length(v_at, 1), 0) and v_at[v_j] = v_i loop
            if v_owner[v_j] is null then
                v_counts[v_slot[v_j] + 1] := v_counts[v_slot[v_j] + 1] + v_c[v_j];
                v_firsts[v_slot[v_j] + 1] := least(v_firsts[v_slot[v_j] + 1], v_t[v_j]);
            else
                v_owned := jsonb_set(v_owned, array[v_owner[v_j]::text],
                                     to_jsonb(coalesce((v_owned ->> v_owner[v_j]::text)::int8, 0) + v_c[v_j]));
            end if;
            v_done := v_done + v_c[v_j];
            v_j := v_j + 1;
        end loop;
        insert into partitionq.census values (p_queue, p_n, v_ticks[v_i], v_counts, v_firsts, v_owned);
    end loop;
    if v_k > 0 then
        update partitionq.census_state set tick_id = v_ticks[v_k] where queue = p_queue and n = p_n;
    end if;
    delete from partitionq.census where queue = p_queue and n = p_n and tick_id < v_min;
    return v_done;
end
$f$;
revoke all on function partitionq.census(text, text, int, bigint) from public;
