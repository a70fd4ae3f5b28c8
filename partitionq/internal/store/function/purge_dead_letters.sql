-- Deletes dead letters of a group (only p_ids when not null; only those
-- dead before p_before when not null) and writes one audit entry with the
-- count (and the key when they share one), then p_note in parentheses (a
-- bulk purge's filter, free text like the reason); returns the count and
-- the entry's id.
create or replace function partitionq.purge_dead_letters(p_queue text, p_grp text, p_ids bigint[], p_before timestamptz,
    p_reason text, p_actor text, p_note text, out purged bigint, out audit_id bigint)
language plpgsql security definer set search_path = pg_catalog, partitionq, pg_temp as $f$
declare
    v_key text;
begin
    if p_queue is null or p_grp is null then
        raise exception 'purge_dead_letters needs a queue and a group' using errcode = '22023';
    end if;
    with gone as (
        delete from partitionq.dead_letter
         where queue = p_queue and grp = p_grp and (p_ids is null or id = any(p_ids)) and (p_before is null or dead_at < p_before)
        returning key)
    select count(*), case when count(distinct key) = 1 then min(key) end into purged, v_key from gone;
    insert into partitionq.audit (db_role, actor, action, queue, grp, key, reason, outcome)
    values (session_user, coalesce(p_actor, ''), 'purge', p_queue, p_grp, v_key, coalesce(p_reason, ''),
            'purged ' || purged || coalesce(' (' || nullif(p_note, '') || ')', ''))
    returning id into audit_id;
end
$f$;
revoke all on function partitionq.purge_dead_letters(text, text, bigint[], timestamptz, text, text, text) from public;
