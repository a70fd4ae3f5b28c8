-- Whether the group's generation with p_slots slots is number p_number: a
-- worker takes a slot only while the generation it runs is still there.
--
-- SECURITY DEFINER: lease's claim calls it in its own statement (the
-- generation table is store's); sql/roles.sql grants it to the worker.
create or replace function partitionq.is_generation(p_queue text, p_grp text, p_slots int, p_number int)
returns boolean language sql stable security definer set search_path = pg_catalog, partitionq, pg_temp as $f$
    select exists (select 1 from partitionq.generation
                    where queue = p_queue and grp = p_grp and slots = p_slots and number = p_number)
$f$;
revoke all on function partitionq.is_generation(text, text, int, int) from public;
