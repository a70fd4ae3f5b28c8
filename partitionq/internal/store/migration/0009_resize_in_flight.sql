-- Version 9: a group's second resize, and every later one, completes. A
-- generation keeps its parent's slot count (parent_slots) after its resize
-- ends (a new slot's reads still take the retries the engine re-delivers
-- for its parents' subscriptions); only resize_txid marks the resize in
-- flight. resize_handoff looked for the resize's generation by
-- parent_slots alone: from the second resize on it could find the previous
-- one's, whose old slots are gone, refuse every handoff as not owned
-- (PQ001), and the worker took the slot again and again without end. Both
-- functions now look for the generation of the resize in flight, as
-- resize_cutover and resize_abort do (resize names it in its refusal of a
-- second resize).
--
-- A resize back to an N the group had before (4 to 8 to 4) makes slot rows
-- (queue, group, N, slot) that an earlier generation had: their epochs
-- started at 0 again, so a run of the earlier generation still stopping
-- could pass a fence of the new one at the same epoch. resize_cutover now
-- starts a generation's epochs at its number times 2^32, above every
-- epoch of the generations before it. Same signatures: the grants stay.

create or replace function partitionq.resize(p_engine text, p_queue text, p_grp text, p_slots int, p_actor text, p_reason text)
returns int language plpgsql security definer set search_path = pg_catalog, partitionq, pg_temp as $f$
declare
    v_gen    partitionq.generation;
    v_newest bigint;
    v_old    text;
begin
    if p_slots is null or p_slots < 1 or p_slots > 256 then
        raise exception 'a group has 1 to 256 slots, not %', p_slots using errcode = '22023';
    end if;
    perform partitionq.ensure_generation(p_engine, p_queue, p_grp);
    -- One resize of a group at a time: its generation rows are locked.
    perform 1 from partitionq.generation where queue = p_queue and grp = p_grp for update;
    if (select count(*) from partitionq.generation where queue = p_queue and grp = p_grp) > 1 then
        select * into v_gen from partitionq.generation
         where queue = p_queue and grp = p_grp and parent_slots is not null and resize_txid is not null;
        raise exception 'group % on queue % is being resized from % to % slots since % (by %): wait for that resize to end (partitionq resize --wait), or abort it while its cutover has not begun (partitionq resize --abort)',
              p_grp, p_queue, v_gen.parent_slots, v_gen.slots, v_gen.created_at, v_gen.created_by using errcode = 'PQ007';
    end if;
    select * into v_gen from partitionq.generation where queue = p_queue and grp = p_grp;
    if v_gen.slots = p_slots then
        raise exception 'group % on queue % has % slots already: nothing to resize', p_grp, p_queue, p_slots using errcode = 'PQ008';
    end if;
    select string_agg(format('%s on %s (process %s)', w.identity, w.host, w.os_pid), ', ') into v_old
      from partitionq.worker w where w.schema_version is null and w.lease_until > clock_timestamp();
    if v_old is not null then
        raise exception 'workers of partitionq before v0.3 are live (%): they would not stop the old slots at the cutover; stop them first', v_old
              using errcode = 'PQ005';
    end if;
    execute format('select max(t.tick_id) from %1$I.tick t join %1$I.queue q on q.queue_id = t.tick_queue where q.queue_name = $1', p_engine)
       into v_newest using p_queue;
    -- Every old slot has its ownership row until it is handed off.
    insert into partitionq.slot (queue, grp, n, slot) select p_queue, p_grp, v_gen.slots, s from generate_series(0, v_gen.slots - 1) s
        on conflict do nothing;
    insert into partitionq.generation (queue, grp, slots, number, parent_slots, resize_txid, resize_after, actor, reason)
    values (p_queue, p_grp, p_slots, v_gen.number + 1, v_gen.slots, txid_current(), coalesce(v_newest, 0),
            coalesce(p_actor, ''), coalesce(p_reason, ''));
    insert into partitionq.audit (db_role, actor, action, queue, grp, reason, outcome)
    values (session_user, coalesce(p_actor, ''), 'resize', p_queue, p_grp, coalesce(p_reason, ''),
            format('started: %s to %s slots (generation %s)', v_gen.slots, p_slots, v_gen.number + 1));
    perform pg_notify('partitionq_slots', p_queue || '/' || p_grp);
    return v_gen.number + 1;
end
$f$;

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
     where queue = p_queue and grp = p_grp and n = v_gen.parent_slots and slot = p_slot and epoch = p_epoch and worker_id is not null
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
    delete from partitionq.slot_progress where queue = p_queue and grp = p_grp and n = v_gen.parent_slots and slot = p_slot;
    delete from partitionq.slot_done where queue = p_queue and grp = p_grp and n = v_gen.parent_slots and slot = p_slot;
    delete from partitionq.slot_rate where queue = p_queue and grp = p_grp and n = v_gen.parent_slots and slot = p_slot;
    delete from partitionq.slot where queue = p_queue and grp = p_grp and n = v_gen.parent_slots and slot = p_slot;
    select count(*) into v_left from partitionq.slot where queue = p_queue and grp = p_grp and n = v_gen.parent_slots;
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

create or replace function partitionq.resize_cutover(p_engine text, p_queue text, p_grp text)
returns bigint language plpgsql security definer set search_path = pg_catalog, partitionq, pg_temp as $f$
declare
    v_gen  partitionq.generation;
    v_tick bigint;
    v_subs int[];
    v_sub  int;
begin
    select * into v_gen from partitionq.generation
     where queue = p_queue and grp = p_grp and parent_slots is not null and resize_txid is not null
       for update;
    if not found then
        return null;
    end if;
    if v_gen.cutover_tick is not null then
        return v_gen.cutover_tick;
    end if;
    v_tick := partitionq.engine_first_tick_seeing(p_engine, p_queue, v_gen.resize_after, v_gen.resize_txid);
    if v_tick is null then
        return null;
    end if;
    for i in 0 .. v_gen.slots - 1 loop
        if (partitionq.engine_sub(p_engine, p_queue, p_grp || '#' || i || '/' || v_gen.slots)).sub_id is not null then
            raise exception 'consumer %#%/% is registered already: a resize to % slots cannot register it at the cutover (unregister the stray consumer)',
                  p_grp, i, v_gen.slots, v_gen.slots using errcode = 'PQ006';
        end if;
        execute format('select %I.register_consumer_at($1, $2, $3)', p_engine) using p_queue, p_grp || '#' || i || '/' || v_gen.slots, v_tick;
    end loop;
    for i in 0 .. v_gen.parent_slots - 1 loop
        v_sub := (partitionq.engine_sub(p_engine, p_queue, p_grp || '#' || i || '/' || v_gen.parent_slots)).sub_id;
        if v_sub is not null then
            v_subs := v_subs || v_sub;
        end if;
    end loop;
    -- Epochs start at the generation's number times 2^32: above any epoch
    -- of an earlier generation with the same N, whose slot rows are gone.
    insert into partitionq.slot (queue, grp, n, slot, epoch)
    select p_queue, p_grp, v_gen.slots, s, v_gen.number::bigint << 32 from generate_series(0, v_gen.slots - 1) s
        on conflict do nothing;
    update partitionq.generation set cutover_tick = v_tick, parent_subs = coalesce(v_subs, '{}')
     where queue = p_queue and grp = p_grp and slots = v_gen.slots;
    perform pg_notify('partitionq_slots', p_queue || '/' || p_grp);
    return v_tick;
end
$f$;
