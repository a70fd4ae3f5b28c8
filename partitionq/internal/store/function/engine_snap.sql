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
