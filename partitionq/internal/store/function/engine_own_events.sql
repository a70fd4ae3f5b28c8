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
