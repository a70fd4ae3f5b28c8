-- The cutover of a resize in flight: once the queue has a tick that sees
-- the resize committed, the first such tick is the cutover. The new
-- slots' consumers are registered at it (each must be new: registering an
-- existing consumer at a tick would reposition it) with their ownership
-- rows, and the subscriptions of the old slots are recorded for the new
-- slots' reads. Idempotent; returns the cutover tick, or null while there
-- is none (or no resize). The new slots' epochs start at the generation's
-- number times 2^32, above every epoch of the generations before it: an
-- epoch names one generation of the group (check_owner).
-- A step of a resize, run as the schema's owner like the others
-- (resize.sql says how).
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
    -- of an earlier generation.
    insert into partitionq.slot (queue, grp, generation, n, slot, epoch)
    select p_queue, p_grp, v_gen.number, v_gen.slots, s, v_gen.number::bigint << 32 from generate_series(0, v_gen.slots - 1) s
        on conflict do nothing;
    update partitionq.generation set cutover_tick = v_tick, parent_subs = coalesce(v_subs, '{}')
     where queue = p_queue and grp = p_grp and slots = v_gen.slots;
    perform pg_notify('partitionq_slots', p_queue || '/' || p_grp);
    return v_tick;
end
$f$;
revoke all on function partitionq.resize_cutover(text, text, text) from public;
