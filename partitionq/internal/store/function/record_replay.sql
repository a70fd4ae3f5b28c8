-- An operator records replays: dead letter p_ids[i] was sent again as
-- event p_ev_ids[i], which this transaction inserted into the queue with
-- the dead letter's key, type and payload (PQ002 otherwise). One audit
-- entry: the dead letter's key and event for one, the count for several
-- (the key too when they share one), then p_note in parentheses (a bulk
-- replay's filter, free text like the reason); returns the count and the
-- entry's id. A bulk replay that found nothing to send records a count of 0.
create or replace function partitionq.record_replay(p_engine text, p_queue text, p_grp text, p_ids bigint[], p_ev_ids bigint[],
    p_reason text, p_actor text, p_note text, out replayed int, out audit_id bigint)
language plpgsql security definer set search_path = pg_catalog, partitionq, pg_temp as $f$
declare
    d partitionq.dead_letter;
    e record;
    v_n int := coalesce(cardinality(p_ids), 0);
    v_key text;
    v_keys int := 0;
begin
    if p_queue is null or p_grp is null or p_ids is null or coalesce(cardinality(p_ev_ids), 0) is distinct from v_n then
        raise exception 'record_replay needs a queue, a group and one replay event per dead letter' using errcode = '22023';
    end if;
    for i in 1 .. v_n loop
        select * into d from partitionq.dead_letter where queue = p_queue and grp = p_grp and id = p_ids[i] for update;
        if not found then
            raise exception 'no dead letter % in group % of queue %', p_ids[i], p_grp, p_queue using errcode = 'PQ003';
        end if;
        if d.replayed_at is not null then
            raise exception 'dead letter % was replayed already, as event %', d.id, d.replay_ev_id using errcode = 'PQ004';
        end if;
        select * into e from partitionq.engine_own_event(p_engine, p_queue, p_ev_ids[i]);
        if not found or e.ev_type is distinct from d.ev_type or e.ev_data is distinct from d.ev_data
           or coalesce(e.ev_key, '') is distinct from d.key
           or exists (select 1 from partitionq.dead_letter x where x.queue = p_queue and x.replay_ev_id = p_ev_ids[i]) then
            raise exception 'event % of queue % is not a replay of dead letter %: a replay is sent in the transaction that records it, with the dead letter''s key, type and payload',
                  p_ev_ids[i], p_queue, d.id using errcode = 'PQ002';
        end if;
        update partitionq.dead_letter set replayed_at = now(), replay_ev_id = p_ev_ids[i] where id = d.id;
        if v_keys = 0 or v_key is distinct from d.key then
            v_keys := v_keys + 1;
            v_key := d.key;
        end if;
    end loop;
    insert into partitionq.audit (db_role, actor, action, queue, grp, key, ev_id, reason, outcome)
    values (session_user, coalesce(p_actor, ''), 'replay', p_queue, p_grp,
            case when v_keys = 1 then v_key end, case when v_n = 1 then d.ev_id end, coalesce(p_reason, ''),
            case when v_n = 1 and p_note is null then 'replayed' else 'replayed ' || v_n end
            || coalesce(' (' || nullif(p_note, '') || ')', ''))
    returning id into audit_id;
    replayed := v_n;
end
$f$;
revoke all on function partitionq.record_replay(text, text, text, bigint[], bigint[], text, text, text) from public;
