-- Version 8: dead-lettering is fenced like every other write that ends
-- work on a slot. give_up takes the slot's epoch and refuses (PQ001) unless
-- the slot is owned at that epoch (partitionq.check_owner, which holds the
-- slot's row until the transaction ends, so that no takeover commits in
-- between): a zombie worker, or a worker role calling it by hand, cannot
-- dead-letter another owner's events. The worker's calls were fenced by
-- the check in their own transaction already; now the function is too.
-- The function has a new signature: the roles that could call the old one
-- may call the new one (sql/roles.sql grants it to the worker role too).
-- Only a schema made at version 4 to 7 has the old one.
--
-- Needs function/give_up.sql

create temporary table give_up_grantees on commit drop as
select r.rolname
  from pg_proc p, aclexplode(p.proacl) a join pg_roles r on r.oid = a.grantee
 where p.oid = to_regprocedure('partitionq.give_up(text, text, text, int, text, bigint[], int[], text[], text[])')
   and a.privilege_type = 'EXECUTE' and a.grantee <> p.proowner;

drop function if exists partitionq.give_up(text, text, text, int, text, bigint[], int[], text[], text[]);

do $$
declare
    v_role text;
begin
    for v_role in select rolname from give_up_grantees loop
        execute format('grant execute on function partitionq.give_up(text, text, text, int, bigint, text, bigint[], int[], text[], text[]) to %I', v_role);
    end loop;
end
$$;
