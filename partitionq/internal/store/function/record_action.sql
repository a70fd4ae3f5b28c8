-- The audit entry of an action that writes no record: retry now, an action
-- whose head was already resolved, a replay already done, a group dropped
-- (once its slots are gone). Skips,
-- quarantines, replays and purges are recorded by the functions that do
-- them (PQ002 here).
create or replace function partitionq.record_action(p_actor text, p_action text, p_queue text, p_grp text, p_key text,
    p_ev_id bigint, p_reason text, p_outcome text)
returns bigint language plpgsql security definer set search_path = pg_catalog, partitionq, pg_temp as $f$
declare
    v_id bigint;
begin
    if p_queue is null or p_grp is null or p_action is null or p_outcome is null then
        raise exception 'record_action needs a queue, a group, an action and its outcome' using errcode = '22023';
    end if;
    if p_action = 'drop_group' then
        -- recorded in the transaction of the drop, once the group's slots are gone
        if p_outcome not like 'dropped %' or exists (select 1 from partitionq.slot where queue = p_queue and grp = p_grp) then
            raise exception 'group % of queue % is not dropped: its slots are still recorded', p_grp, p_queue using errcode = 'PQ002';
        end if;
    elsif (p_action, p_outcome) not in (('retry', 'retry_scheduled'), ('retry', 'already_resolved'), ('skip', 'already_resolved'),
                                     ('quarantine', 'already_resolved'), ('replay', 'already_replayed')) then
        raise exception 'record_action does not record % with outcome %: skips and quarantines are recorded by set_aside, replays by record_replay, purges by purge_dead_letters',
              p_action, p_outcome using errcode = 'PQ002';
    end if;
    insert into partitionq.audit (db_role, actor, action, queue, grp, key, ev_id, reason, outcome)
    values (session_user, coalesce(p_actor, ''), p_action, p_queue, p_grp, p_key, p_ev_id, coalesce(p_reason, ''), p_outcome)
    returning id into v_id;
    return v_id;
end
$f$;
revoke all on function partitionq.record_action(text, text, text, text, text, bigint, text, text) from public;
