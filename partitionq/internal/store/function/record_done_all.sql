-- An exactly-once run handler's completion (TxRunHandler): the events
-- p_ev_ids of one batch recorded done in the handler's own transaction,
-- after one ownership check (SQLSTATE PQ001 when not owned), with one
-- insert: record_done for a run, without a call per event.
create or replace function partitionq.record_done_all(p_queue text, p_grp text, p_n int, p_slot int, p_epoch bigint, p_batch bigint, p_ev_ids bigint[])
returns void language plpgsql security definer set search_path = pg_catalog, pg_temp as $f$
declare
    v_gen int;
begin
    v_gen := partitionq.owner_generation(p_queue, p_grp, p_n, p_slot, p_epoch);
    if v_gen is null then
        raise exception 'slot % of % of group % on queue % is not owned at epoch %', p_slot, p_n, p_grp, p_queue, p_epoch
              using errcode = 'PQ001';
    end if;
    insert into partitionq.slot_done (queue, grp, generation, slot, batch_id, ev_id)
    select p_queue, p_grp, v_gen, p_slot, p_batch, id from unnest(p_ev_ids) as id on conflict do nothing;
end
$f$;
revoke all on function partitionq.record_done_all(text, text, int, int, bigint, bigint, bigint[]) from public;
