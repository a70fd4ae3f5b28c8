-- Version 11: the ownership package (lease) no longer reads
-- partitionq.generation itself. Each of partitionq's tables is queried by
-- one Go package (docs/architecture.md); generation is store's, slot is
-- lease's. A worker's claim and a resize's new slots waiting for their
-- parents still need to know, in the same statement, about the group's
-- generations: these three functions answer it, and lease calls them.
-- SECURITY DEFINER like every granted function of the schema (they read
-- only what a worker may read anyway: the group's generation rows);
-- the roles that may hand a slot off (sql/roles.sql's worker) may call
-- them, as granted here for a database whose roles were made before.

-- Whether the group has recorded its generations (a group set up before
-- version 5 has none until its first resize): a claim makes a slot's
-- ownership row only for such a group.
create or replace function partitionq.has_generations(p_queue text, p_grp text)
returns boolean language sql stable security definer set search_path = pg_catalog, partitionq, pg_temp as $f$
    select exists (select 1 from partitionq.generation where queue = p_queue and grp = p_grp)
$f$;

-- Whether the group's generation with p_slots slots is number p_number: a
-- worker takes a slot only while the generation it runs is still there.
create or replace function partitionq.is_generation(p_queue text, p_grp text, p_slots int, p_number int)
returns boolean language sql stable security definer set search_path = pg_catalog, partitionq, pg_temp as $f$
    select exists (select 1 from partitionq.generation
                    where queue = p_queue and grp = p_grp and slots = p_slots and number = p_number)
$f$;

-- Whether a resize of the group from p_parent to p_slots slots is in
-- flight: the new slots wait for their parents' handoffs only then.
create or replace function partitionq.resizing(p_queue text, p_grp text, p_parent int, p_slots int)
returns boolean language sql stable security definer set search_path = pg_catalog, partitionq, pg_temp as $f$
    select exists (select 1 from partitionq.generation
                    where queue = p_queue and grp = p_grp and slots = p_slots
                      and parent_slots = p_parent and resize_txid is not null)
$f$;

revoke all on function partitionq.has_generations(text, text) from public;
revoke all on function partitionq.is_generation(text, text, int, int) from public;
revoke all on function partitionq.resizing(text, text, int, int) from public;
do $$
declare
    v_role text;
begin
    for v_role in
        select r.rolname
          from pg_proc p, aclexplode(p.proacl) a join pg_roles r on r.oid = a.grantee
         where p.oid = 'partitionq.resize_handoff(text, text, text, int, bigint)'::regprocedure
           and a.privilege_type = 'EXECUTE' and a.grantee <> p.proowner
    loop
        execute format('grant execute on function partitionq.has_generations(text, text),
                                                   partitionq.is_generation(text, text, int, int),
                                                   partitionq.resizing(text, text, int, int) to %I', v_role);
    end loop;
end
$$;
