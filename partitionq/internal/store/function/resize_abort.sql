-- Aborts a resize whose cutover has not begun: no old slot handed off
-- (PQ009 otherwise). The new generation's consumers, registered at the
-- cutover, hold nothing yet (their slots wait for their parents): they are
-- unregistered, and the old generation goes on past the cutover; the
-- aborted generation's number is never used again (resize.sql).
-- A step of a resize, run as the schema's owner like the others
-- (resize.sql says how).
create or replace function partitionq.resize_abort(p_engine text, p_queue text, p_grp text, p_actor text, p_reason text)
returns int language plpgsql security definer set search_path = pg_catalog, partitionq, pg_temp as $f$
declare
    v_gen  partitionq.generation;
    v_left int;
begin
    perform 1 from partitionq.generation where queue = p_queue and grp = p_grp for update;
    select * into v_gen from partitionq.generation
     where queue = p_queue and grp = p_grp and parent_slots is not null and resize_txid is not null;
    if not found then
        raise exception 'group % on queue % has no resize in flight: nothing to abort', p_grp, p_queue using errcode = 'PQ002';
    end if;
    select count(*) into v_left from partitionq.slot where queue = p_queue and grp = p_grp and generation = v_gen.parent_number;
    if v_left < v_gen.parent_slots then
        raise exception 'the resize of group % on queue % from % to % slots is past its cutover: % old slots were handed off to the new ones, so it can only complete (partitionq resize --wait)',
              p_grp, p_queue, v_gen.parent_slots, v_gen.slots, v_gen.parent_slots - v_left using errcode = 'PQ009';
    end if;
    if v_gen.cutover_tick is not null then
        for i in 0 .. v_gen.slots - 1 loop
            execute format('select %I.unregister_consumer($1, $2)', p_engine) using p_queue, p_grp || '#' || i || '/' || v_gen.slots;
        end loop;
    end if;
    delete from partitionq.slot_progress where queue = p_queue and grp = p_grp and generation = v_gen.number;
    delete from partitionq.slot_done where queue = p_queue and grp = p_grp and generation = v_gen.number;
    delete from partitionq.slot_rate where queue = p_queue and grp = p_grp and generation = v_gen.number;
    delete from partitionq.slot where queue = p_queue and grp = p_grp and generation = v_gen.number;
    delete from partitionq.generation where queue = p_queue and grp = p_grp and slots = v_gen.slots;
    -- The aborted number is not used again (resize.sql).
    update partitionq.generation set aborted = greatest(v_gen.number, coalesce(aborted, 0))
     where queue = p_queue and grp = p_grp and slots = v_gen.parent_slots;
    insert into partitionq.audit (db_role, actor, action, queue, grp, reason, outcome)
    values (session_user, coalesce(p_actor, ''), 'resize', p_queue, p_grp, coalesce(p_reason, ''),
            format('aborted: %s to %s slots', v_gen.parent_slots, v_gen.slots));
    perform pg_notify('partitionq_slots', p_queue || '/' || p_grp);
    return v_gen.parent_slots;
end
$f$;
revoke all on function partitionq.resize_abort(text, text, text, text, text) from public;
