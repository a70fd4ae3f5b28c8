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
