-- Starts a resize of a group to p_slots slots; returns the new
-- generation's number. One resize at a time (PQ007 while one is in
-- flight). Nothing is registered yet: the new slots' consumers are
-- registered at the cutover (resize_cutover), the first tick that sees
-- this transaction committed. Refused while a worker of an earlier
-- partitionq is live (it would not stop its old slots at the cutover).
--
-- The steps of a resize run as the schema's owner (SECURITY DEFINER,
-- search_path pinned), who has the engine's rights; the engine's schema is
-- an argument checked against the two known names and quoted with %I. Only
-- the engine's own functions register, reposition and unregister consumers
-- and put events in the retry queue. The resize in flight is the
-- generation whose resize_txid is set (a generation keeps parent_slots
-- after its resize ends).
create or replace function partitionq.resize(p_engine text, p_queue text, p_grp text, p_slots int, p_actor text, p_reason text)
returns int language plpgsql security definer set search_path = pg_catalog, partitionq, pg_temp as $f$
declare
    v_gen    partitionq.generation;
    v_newest bigint;
    v_old    text;
    v_number int;
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
    insert into partitionq.slot (queue, grp, generation, n, slot)
    select p_queue, p_grp, v_gen.number, v_gen.slots, s from generate_series(0, v_gen.slots - 1) s
        on conflict do nothing;
    -- A number is never used twice in a group: past one an aborted resize used.
    v_number := greatest(v_gen.number, coalesce(v_gen.aborted, 0)) + 1;
    insert into partitionq.generation (queue, grp, slots, number, parent_slots, parent_number, resize_txid, resize_after, actor, reason)
    values (p_queue, p_grp, p_slots, v_number, v_gen.slots, v_gen.number, txid_current(), coalesce(v_newest, 0),
            coalesce(p_actor, ''), coalesce(p_reason, ''));
    insert into partitionq.audit (db_role, actor, action, queue, grp, reason, outcome)
    values (session_user, coalesce(p_actor, ''), 'resize', p_queue, p_grp, coalesce(p_reason, ''),
            format('started: %s to %s slots (generation %s)', v_gen.slots, p_slots, v_number));
    perform pg_notify('partitionq_slots', p_queue || '/' || p_grp);
    return v_number;
end
$f$;
revoke all on function partitionq.resize(text, text, text, int, text, text) from public;
