-- A worker gives events of its slot up: each must be in the slot's open
-- batch or in its retry queue (PQ002 otherwise). Content from the engine;
-- the dead letter records the slot's generation (its N). Fenced like every
-- write that ends work on a slot: refused (PQ001) unless the slot is owned
-- at p_epoch (check_owner holds the slot's row until the transaction ends,
-- so that no takeover commits in between): a zombie worker, or a worker
-- role calling it by hand, cannot dead-letter another owner's events.
create or replace function partitionq.give_up(p_engine text, p_queue text, p_grp text, p_slot int, p_epoch bigint, p_consumer text,
    p_ev_ids bigint[], p_attempts int[], p_errors text[], p_reasons text[])
returns int language plpgsql security definer set search_path = pg_catalog, partitionq, pg_temp as $f$
declare
    v_n       int := partitionq.slot_count(p_grp, p_slot, p_consumer);
    v_count   int;
    v_missing bigint[];
begin
    if p_queue is null or p_ev_ids is null
       or cardinality(p_ev_ids) is distinct from cardinality(p_attempts)
       or cardinality(p_ev_ids) is distinct from cardinality(p_errors)
       or cardinality(p_ev_ids) is distinct from cardinality(p_reasons) then
        raise exception 'give_up needs a queue, the events, and one attempt count, error and reason per event' using errcode = '22023';
    end if;
    if exists (select 1 from unnest(p_reasons) r where r is null or r not in ('handler', 'max_attempts', 'max_blocked')) then
        raise exception 'a worker gives an event up for handler, max_attempts or max_blocked only: skip and quarantine are an operator''s (set_aside)'
              using errcode = '22023';
    end if;
    if not partitionq.check_owner(p_queue, p_grp, v_n, p_slot, p_epoch) then
        raise exception 'slot % of % of group % on queue % is not owned at epoch %: only its owner gives its events up', p_slot, v_n, p_grp, p_queue, p_epoch
              using errcode = 'PQ001';
    end if;
    with ev as materialized (
        select distinct on (e.ev_id) e.*
          from partitionq.engine_events(p_engine, p_queue, p_consumer, v_n, p_slot, p_ev_ids) e
         order by e.ev_id, e.parked desc),
    ins as (
        insert into partitionq.dead_letter (queue, grp, slot, slots, ev_id, ev_time, ev_type, ev_data, key, attempts,
                                            last_error, reason, actor, db_role)
        select p_queue, p_grp, p_slot, v_n, ev.ev_id, ev.ev_time, ev.ev_type, ev.ev_data, coalesce(ev.ev_key, ''),
               greatest(coalesce(u.att, 0), ev.ev_retry), coalesce(u.err, ''), u.rsn, 'worker', session_user
          from unnest(p_ev_ids, p_attempts, p_errors, p_reasons) u(id, att, err, rsn) join ev on ev.ev_id = u.id
         order by ev.ev_id -- dead letters' ids in event order
            on conflict (queue, grp, ev_id) do nothing
        returning 1)
    select (select count(*) from ins),
           array(select u.id from unnest(p_ev_ids) u(id) where not exists (select 1 from ev where ev.ev_id = u.id))
      into v_count, v_missing;
    if cardinality(v_missing) > 0 then
        raise exception 'event % of queue % is not slot % of group %''s to give up: it is neither in the slot''s open batch nor in its retry queue',
              v_missing[1], p_queue, p_slot, p_grp using errcode = 'PQ002';
    end if;
    return v_count;
end
$f$;
revoke all on function partitionq.give_up(text, text, text, int, bigint, text, bigint[], int[], text[], text[]) from public;
