-- The event p_ev_id of queue p_queue if the current transaction inserted
-- it (a replay is sent and recorded in one transaction). A read of the
-- engine's state for record_replay: not SECURITY DEFINER, granted to nobody.
create or replace function partitionq.engine_own_event(p_engine text, p_queue text, p_ev_id bigint)
returns table (ev_type text, ev_data text, ev_key text)
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
    -- ev_txid is the inserting transaction's (PgQ: bigint, PgQue: xid8).
    return query execute format('select coalesce(ev_type, ''''), coalesce(ev_data, ''''), ev_extra1 from %s
         where ev_id = $1 and ev_txid = %s', v_pfx,
         case p_engine when 'pgq' then 'txid_current()' else 'pg_current_xact_id()' end)
        using p_ev_id;
end
$f$;
revoke all on function partitionq.engine_own_event(text, text, bigint) from public;
