-- The ownership check of a slot's owner: the generation of slot p_slot of
-- the group's generation of p_n slots when the slot is owned at epoch
-- p_epoch, else null. The row stays locked for share until the caller's
-- transaction ends, so a takeover waits for it. check_owner answers with
-- it; record_done and record_done_all record their completions in the
-- generation it finds. Granted to nobody: those functions call it as the
-- schema's owner.
create or replace function partitionq.owner_generation(p_queue text, p_grp text, p_n int, p_slot int, p_epoch bigint)
returns int language plpgsql set search_path = pg_catalog, pg_temp as $f$
declare
    v_gen int;
begin
    select generation into v_gen from partitionq.slot
     where queue = p_queue and grp = p_grp and n = p_n and slot = p_slot and epoch = p_epoch and worker_id is not null
       for share;
    return v_gen;
end
$f$;
revoke all on function partitionq.owner_generation(text, text, int, int, bigint) from public;
