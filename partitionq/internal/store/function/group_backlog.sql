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
