-- Version 11: the ownership package (lease) no longer reads
-- partitionq.generation itself. Each of partitionq's tables is queried by
-- one Go package (docs/architecture.md); generation is store's, slot is
-- lease's. A worker's claim still needs to know, in the same statement,
-- whether the group has recorded its generations: has_generations answers
-- it, and lease calls it. (Two more, is_generation and resizing, were made
-- here until version 17 keyed the slot rows by generation and made them
-- needless: a database upgraded past this version never gets them.)
-- SECURITY DEFINER like every granted function of the schema (they read
-- only what a worker may read anyway: the group's generation rows);
-- the roles that may hand a slot off (sql/roles.sql's worker) may call
-- it, as granted here for a database whose roles were made before.
--
-- Needs function/has_generations.sql
-- Needs function/resize_handoff.sql (whose grantees get it)

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
        execute format('grant execute on function partitionq.has_generations(text, text) to %I', v_role);
    end loop;
end
$$;
