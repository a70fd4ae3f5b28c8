-- An old slot drained to the cutover hands its blocked keys to the new
-- generation and leaves the engine: its owner, at its epoch, calls this
-- once the slot's consumer stands at the cutover tick with no open batch
-- (and no drain of it runs). Under the retry mover's table lock, every
-- retry-queue row of the old consumer (parked heads and waiting events,
-- timed retries) is put, through the engine's event_retry_raw with the same
-- retry time and count, into the retry queue of the key's new slot, and
-- its failure record follows it; then the old consumer is unregistered
-- (which would have deleted those rows) and its ownership, progress and
-- rate rows go. When it was the old generation's last slot, the resize is
-- complete. Returns whether the resize is complete.
-- A step of a resize, run as the schema's owner like the others
-- (resize.sql says how).
create or replace function partitionq.resize_handoff(p_engine text, p_queue text, p_grp text, p_slot int, p_epoch bigint)
returns boolean language plpgsql security definer set search_path = pg_catalog, partitionq, pg_temp as $f$
declare
    v_gen  partitionq.generation;
    v_old  text;
    v_sub  record;
    v_slot text;
    v_left int;
begin
    select * into v_gen from partitionq.generation
     where queue = p_queue and grp = p_grp and parent_slots is not null and resize_txid is not null for update;
    if not found or v_gen.cutover_tick is null then
        raise exception 'group % on queue % has no resize past its cutover: slot % has nothing to hand off', p_grp, p_queue, p_slot
              using errcode = 'PQ002';
    end if;
    perform 1 from partitionq.slot
     where queue = p_queue and grp = p_grp and generation = v_gen.parent_number and slot = p_slot and epoch = p_epoch and worker_id is not null
       for update;
    if not found then
        raise exception 'slot % of % of group % on queue % is not owned at epoch %', p_slot, v_gen.parent_slots, p_grp, p_queue, p_epoch
              using errcode = 'PQ001';
    end if;
    v_old := p_grp || '#' || p_slot || '/' || v_gen.parent_slots;
    v_sub := partitionq.engine_sub(p_engine, p_queue, v_old);
    if v_sub.sub_id is null or v_sub.last_tick is distinct from v_gen.cutover_tick or v_sub.batch_id is not null then
        raise exception 'slot % of % of group % on queue % is not drained to the cutover (tick %): its consumer is at tick %, open batch %',
              p_slot, v_gen.parent_slots, p_grp, p_queue, v_gen.cutover_tick, v_sub.last_tick, coalesce(v_sub.batch_id::text, 'none')
              using errcode = 'PQ002';
    end if;
    v_slot := '(case when r.ev_extra1 is null then 0 else (hashtextextended(r.ev_extra1, 0) % ' || v_gen.slots || ' + ' || v_gen.slots
              || ') % ' || v_gen.slots || ' end)';
    execute format('lock table %I.retry_queue in share update exclusive mode', p_engine);
    -- Rows a drain or an operator holds: wait for them (up to the caller's lock_timeout).
    execute format('select count(*) from (select 1 from %I.retry_queue r where r.ev_owner = $1 for update) x', p_engine) using v_sub.sub_id;
    execute format('update partitionq.failure f set consumer = $2 || ''#'' || %s || ''/'' || $3
                      from %I.retry_queue r where f.queue = $4 and f.consumer = $5 and r.ev_owner = $1 and r.ev_id = f.ev_id',
                   v_slot, p_engine)
       using v_sub.sub_id, p_grp, v_gen.slots, p_queue, v_old;
    delete from partitionq.failure where queue = p_queue and consumer = v_old;
    execute format('select count(%1$I.event_retry_raw($2, $3 || ''#'' || %2$s || ''/'' || $4, r.ev_retry_after, r.ev_id, r.ev_time, r.ev_retry,
                            r.ev_type, r.ev_data, r.ev_extra1, r.ev_extra2, r.ev_extra3, r.ev_extra4))
                      from (select * from %1$I.retry_queue r where r.ev_owner = $1 order by r.ev_id) r', p_engine, v_slot)
       using v_sub.sub_id, p_queue, p_grp, v_gen.slots;
    execute format('delete from %I.retry_queue where ev_owner = $1', p_engine) using v_sub.sub_id;
    execute format('select %I.unregister_consumer($1, $2)', p_engine) using p_queue, v_old;
    delete from partitionq.slot_progress where queue = p_queue and grp = p_grp and generation = v_gen.parent_number and slot = p_slot;
    delete from partitionq.slot_done where queue = p_queue and grp = p_grp and generation = v_gen.parent_number and slot = p_slot;
    delete from partitionq.slot_rate where queue = p_queue and grp = p_grp and generation = v_gen.parent_number and slot = p_slot;
    delete from partitionq.slot where queue = p_queue and grp = p_grp and generation = v_gen.parent_number and slot = p_slot;
    select count(*) into v_left from partitionq.slot where queue = p_queue and grp = p_grp and generation = v_gen.parent_number;
    if v_left = 0 then
        delete from partitionq.generation where queue = p_queue and grp = p_grp and slots = v_gen.parent_slots;
        update partitionq.generation set resize_txid = null
         where queue = p_queue and grp = p_grp and slots = v_gen.slots;
        insert into partitionq.audit (db_role, actor, action, queue, grp, reason, outcome)
        values (session_user, 'worker', 'resize', p_queue, p_grp, '',
                format('completed: %s to %s slots (generation %s)', v_gen.parent_slots, v_gen.slots, v_gen.number));
    end if;
    perform pg_notify('partitionq_slots', p_queue || '/' || p_grp);
    return v_left = 0;
end
$f$;
revoke all on function partitionq.resize_handoff(text, text, text, int, bigint) from public;
