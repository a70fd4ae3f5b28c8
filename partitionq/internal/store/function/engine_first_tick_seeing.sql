-- The first tick of the queue after p_after whose snapshot sees the
-- transaction p_txid committed (null while there is none).
--
-- An engine-facing step of a resize, run as the schema's owner by the
-- resize functions (not SECURITY DEFINER itself, granted to nobody); the
-- engine's schema is an argument checked against the two known names.
create or replace function partitionq.engine_first_tick_seeing(p_engine text, p_queue text, p_after bigint, p_txid bigint)
returns bigint language plpgsql stable set search_path = pg_catalog, pg_temp as $f$
declare
    v_tick bigint;
    v_seen text;
begin
    if p_engine = 'pgq' then
        v_seen := 'txid_visible_in_snapshot($2, t.tick_snapshot)';
    elsif p_engine = 'pgque' then
        v_seen := 'pg_visible_in_snapshot($2::text::xid8, t.tick_snapshot)';
    else
        raise exception 'unknown engine schema %: pgq or pgque', p_engine using errcode = '22023';
    end if;
    execute format('select min(t.tick_id) from %1$I.tick t join %1$I.queue q on q.queue_id = t.tick_queue
                     where q.queue_name = $1 and t.tick_id > $3 and ' || v_seen, p_engine)
       into v_tick using p_queue, p_txid, p_after;
    return v_tick;
end
$f$;
revoke all on function partitionq.engine_first_tick_seeing(text, text, bigint, bigint) from public;
