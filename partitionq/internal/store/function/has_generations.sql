-- Whether the group has recorded its generations (a group set up before
-- version 5 has none until its first resize): a claim makes a slot's
-- ownership row only for such a group.
--
-- SECURITY DEFINER: lease's claim calls it in its own statement (the
-- generation table is store's); sql/roles.sql grants it to the worker.
create or replace function partitionq.has_generations(p_queue text, p_grp text)
returns boolean language sql stable security definer set search_path = pg_catalog, partitionq, pg_temp as $f$
    select exists (select 1 from partitionq.generation where queue = p_queue and grp = p_grp)
$f$;
revoke all on function partitionq.has_generations(text, text) from public;
