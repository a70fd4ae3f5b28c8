-- Whether a resize of the group from p_parent to p_slots slots is in
-- flight: the new slots wait for their parents' handoffs only then.
--
-- SECURITY DEFINER: lease's claim and RemainingSlots call it in their own
-- statements (the generation table is store's); sql/roles.sql grants it to
-- the worker.
create or replace function partitionq.resizing(p_queue text, p_grp text, p_parent int, p_slots int)
returns boolean language sql stable security definer set search_path = pg_catalog, partitionq, pg_temp as $f$
    select exists (select 1 from partitionq.generation
                    where queue = p_queue and grp = p_grp and slots = p_slots
                      and parent_slots = p_parent and resize_txid is not null)
$f$;
revoke all on function partitionq.resizing(text, text, int, int) from public;
