-- The census of every (queue, N) of the database's groups, each until
-- about p_budget events: what the ticker runs after its ticks.
--
-- Only the queues whose newest tick is past the census of one of their N
-- (or that have none) are looked at: an idle queue costs nothing.
create or replace function partitionq.census_all(p_engine text, p_budget bigint)
returns bigint language plpgsql security definer set search_path = pg_catalog, partitionq, pg_temp as $f$
declare
    v_r    record;
    v_done bigint := 0;
begin
    if p_engine is null or p_engine not in ('pgq', 'pgque') then
        raise exception 'unknown engine schema %: pgq or pgque', p_engine using errcode = '22023';
    end if;
    for v_r in execute format($q$
        with due as (
            select q.queue_id, q.queue_name
              from %1$I.queue q
              cross join lateral (select max(t.tick_id) as newest from %1$I.tick t where t.tick_queue = q.queue_id) t
              left join lateral (select min(cs.tick_id) as at from partitionq.census_state cs where cs.queue = q.queue_name) c on true
             where c.at is null or c.at < t.newest)
        select distinct due.queue_name as queue, substring(c.co_name from '#[0-9]+/([0-9]+)$')::int as n
          from due join %1$I.subscription s on s.sub_queue = due.queue_id join %1$I.consumer c on c.co_id = s.sub_consumer
         where c.co_name ~ '^.+#[0-9]+/[0-9]{1,6}$'
        union
        select cs.queue, cs.n from partitionq.census_state cs
         where cs.queue in (select queue_name from due)
            or not exists (select 1 from %1$I.queue q where q.queue_name = cs.queue)$q$, p_engine) loop
        v_done := v_done + greatest(partitionq.census(p_engine, v_r.queue, v_r.n, p_budget), 0);
    end loop;
    return v_done;
end
$f$;
revoke all on function partitionq.census_all(text, bigint) from public;
