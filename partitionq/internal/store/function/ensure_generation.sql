-- A group's first generation, from its engine consumers "<grp>#<s>/<N>",
-- when it has no generation row yet (a group set up before version 5).
-- Setup (the owner) calls it, and resize (as the owner); granted to nobody.
create or replace function partitionq.ensure_generation(p_engine text, p_queue text, p_grp text)
returns void language plpgsql set search_path = pg_catalog, pg_temp as $f$
declare
    v_n  int;
    v_ns int;
begin
    if exists (select 1 from partitionq.generation where queue = p_queue and grp = p_grp) then
        return;
    end if;
    if p_engine is null or p_engine not in ('pgq', 'pgque') then
        raise exception 'unknown engine schema %: pgq or pgque', p_engine using errcode = '22023';
    end if;
    execute format('select count(distinct x.n), min(x.n)
                      from (select split_part(substring(c.co_name from length($2) + 2), ''/'', 2)::int as n
                              from %1$I.subscription s join %1$I.queue q on q.queue_id = s.sub_queue
                              join %1$I.consumer c on c.co_id = s.sub_consumer
                             where q.queue_name = $1 and left(c.co_name, length($2) + 1) = $2 || ''#''
                               and substring(c.co_name from length($2) + 2) ~ ''^[0-9]{1,9}/[0-9]{1,9}$'') x', p_engine)
       into v_ns, v_n using p_queue, p_grp;
    if v_ns = 0 then
        raise exception 'no consumer group % on queue %: run partitionq setup first', p_grp, p_queue using errcode = 'PQ006';
    end if;
    if v_ns > 1 then
        raise exception 'group % on queue % has engine consumers for several numbers of slots and no record of a resize: unregister the stray consumers (docs/operations.md)',
              p_grp, p_queue using errcode = 'PQ006';
    end if;
    insert into partitionq.generation (queue, grp, slots, number, reason)
    values (p_queue, p_grp, v_n, 1, 'the group as set up') on conflict do nothing;
    insert into partitionq.slot (queue, grp, generation, n, slot) select p_queue, p_grp, 1, v_n, s from generate_series(0, v_n - 1) s
        on conflict do nothing;
end
$f$;
revoke all on function partitionq.ensure_generation(text, text, text) from public;
