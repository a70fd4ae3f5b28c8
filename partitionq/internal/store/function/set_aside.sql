-- An operator skips or quarantines events parked for a slot (PQ002 for one
-- that is not parked there); attempts and last error from their failure
-- records; the dead letter records the slot's generation (its N); one
-- audit entry.
create or replace function partitionq.set_aside(p_engine text, p_queue text, p_grp text, p_slot int, p_consumer text,
    p_action text, p_ev_ids bigint[], p_reason text, p_actor text)
returns int language plpgsql security definer set search_path = pg_catalog, partitionq, pg_temp as $f$
declare
    v_n       int := partitionq.slot_count(p_grp, p_slot, p_consumer);
    v_count   int;
    v_missing bigint[];
    v_head    bigint;
    v_key     text;
    v_keys    int;
begin
    if p_action is null or p_action not in ('skip', 'quarantine') then
        raise exception 'set_aside records a skip or a quarantine, not %', p_action using errcode = '22023';
    end if;
    if p_queue is null or p_ev_ids is null or cardinality(p_ev_ids) = 0 then
        raise exception 'set_aside needs a queue and at least one event' using errcode = '22023';
    end if;
    with ev as materialized (
        select e.* from partitionq.engine_events(p_engine, p_queue, p_consumer, v_n, p_slot, p_ev_ids) e where e.parked),
    ins as (
        insert into partitionq.dead_letter (queue, grp, slot, slots, ev_id, ev_time, ev_type, ev_data, key, attempts,
                                            last_error, reason, actor, db_role)
        select p_queue, p_grp, p_slot, v_n, ev.ev_id, ev.ev_time, ev.ev_type, ev.ev_data, coalesce(ev.ev_key, ''),
               greatest(coalesce(f.attempts, 0), ev.ev_retry), coalesce(f.last_error, ''),
               p_action || case when coalesce(p_reason, '') = '' then '' else ': ' || p_reason end,
               coalesce(p_actor, ''), session_user
          from ev left join partitionq.failure f on f.queue = p_queue and f.consumer = p_consumer and f.ev_id = ev.ev_id
         order by ev.ev_id -- dead letters' ids in event order
            on conflict (queue, grp, ev_id) do nothing
        returning 1)
    select (select count(*) from ins),
           array(select u.id from unnest(p_ev_ids) u(id) where not exists (select 1 from ev where ev.ev_id = u.id)),
           (select min(ev.ev_id) from ev), (select min(coalesce(ev.ev_key, '')) from ev),
           (select count(distinct coalesce(ev.ev_key, '')) from ev)
      into v_count, v_missing, v_head, v_key, v_keys;
    if cardinality(v_missing) > 0 then
        raise exception 'event % of queue % is not parked for slot % of group %: only a blocked key''s parked events are skipped or quarantined',
              v_missing[1], p_queue, p_slot, p_grp using errcode = 'PQ002';
    end if;
    if v_keys > 1 then
        raise exception 'a % acts on one key: the events given are of % keys', p_action, v_keys using errcode = '22023';
    end if;
    insert into partitionq.audit (db_role, actor, action, queue, grp, key, ev_id, reason, outcome)
    values (session_user, coalesce(p_actor, ''), p_action, p_queue, p_grp, v_key, v_head, coalesce(p_reason, ''),
            case p_action when 'skip' then 'skipped' else 'quarantined' end);
    return v_count;
end
$f$;
revoke all on function partitionq.set_aside(text, text, text, int, text, text, bigint[], text, text) from public;
