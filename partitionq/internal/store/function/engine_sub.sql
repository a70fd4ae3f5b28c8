-- The subscription of a consumer (null when it is not registered), its
-- position and its open batch.
--
-- An engine-facing step of a resize, run as the schema's owner by the
-- resize functions (not SECURITY DEFINER itself, granted to nobody); the
-- engine's schema is an argument checked against the two known names.
create or replace function partitionq.engine_sub(p_engine text, p_queue text, p_consumer text,
    out sub_id int, out last_tick bigint, out batch_id bigint)
language plpgsql stable set search_path = pg_catalog, pg_temp as $f$
begin
    if p_engine is null or p_engine not in ('pgq', 'pgque') then
        raise exception 'unknown engine schema %: pgq or pgque', p_engine using errcode = '22023';
    end if;
    execute format('select s.sub_id, s.sub_last_tick, s.sub_batch from %1$I.subscription s join %1$I.queue q on q.queue_id = s.sub_queue
                     join %1$I.consumer c on c.co_id = s.sub_consumer where q.queue_name = $1 and c.co_name = $2', p_engine)
       into sub_id, last_tick, batch_id using p_queue, p_consumer;
end
$f$;
revoke all on function partitionq.engine_sub(text, text, text) from public;
