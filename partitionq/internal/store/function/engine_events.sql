-- The events among p_ids of the slot p_slot (of p_n) that consumer
-- p_consumer of queue p_queue may give up: its own rows of the retry queue
-- (parked, or a timed retry), and the events of its open batch (the
-- engine's own description of the batch, batch_event_sql, which keeps the
-- retried events of this consumer only). An event of
-- another slot, of no open batch, or already resolved is not returned.
--
-- A read of the engine's state for give_up and set_aside: not SECURITY
-- DEFINER, granted to nobody. The engine's schema is an argument checked
-- against the two known names.
create or replace function partitionq.engine_events(p_engine text, p_queue text, p_consumer text, p_n int, p_slot int, p_ids bigint[])
returns table (ev_id bigint, ev_time timestamptz, ev_retry int, ev_type text, ev_data text, ev_key text, parked boolean)
language plpgsql stable set search_path = pg_catalog, pg_temp as $f$
declare
    v_sub   int;
    v_batch bigint;
    v_sql   text;
    v_found bigint[];
    v_rest  bigint[];
    v_slot  constant text := '(case when ev_extra1 is null then 0 else (hashtextextended(ev_extra1, 0) %% $3 + $3) %% $3 end) = $4';
    v_retry text;
begin
    if p_engine is null or p_engine not in ('pgq', 'pgque') then
        raise exception 'unknown engine schema %: pgq or pgque', p_engine using errcode = '22023';
    end if;
    execute format('select s.sub_id, s.sub_batch from %1$I.subscription s join %1$I.queue q on q.queue_id = s.sub_queue
                     join %1$I.consumer c on c.co_id = s.sub_consumer where q.queue_name = $1 and c.co_name = $2', p_engine)
       into v_sub, v_batch using p_queue, p_consumer;
    if v_sub is null then
        return;
    end if;
    v_retry := format('select r.ev_id, r.ev_time, coalesce(r.ev_retry, 0)::int, coalesce(r.ev_type, ''''),
            coalesce(r.ev_data, ''''), r.ev_extra1, true from %I.retry_queue r
         where r.ev_owner = $1 and r.ev_id = any($2) and ' || replace(v_slot, 'ev_extra1', 'r.ev_extra1'), p_engine);
    execute 'select array_agg(x.ev_id) from (' || v_retry || ') x' into v_found using v_sub, p_ids, p_n, p_slot;
    return query execute v_retry using v_sub, p_ids, p_n, p_slot;
    -- Only the events not in the retry queue are looked for in the batch
    -- (a parked event's drain may run while the slot's batch is finished).
    v_rest := array(select unnest(p_ids) except select unnest(v_found));
    if v_batch is null or cardinality(v_rest) = 0 then
        return;
    end if;
    begin
        execute format('select %I.batch_event_sql($1)', p_engine) into v_sql using v_batch;
    exception when raise_exception then
        return; -- finished since ("Cannot find data for batch"): none of it is open
    end;
    return query execute format('select e.ev_id, e.ev_time, coalesce(e.ev_retry, 0)::int, coalesce(e.ev_type, ''''),
            coalesce(e.ev_data, ''''), e.ev_extra1, false from (%s) e
         where e.ev_id = any($2) and ' || replace(v_slot, 'ev_extra1', 'e.ev_extra1'), v_sql)
        using v_sub, v_rest, p_n, p_slot;
end
$f$;
revoke all on function partitionq.engine_events(text, text, text, int, int, bigint[]) from public;
