-- A handler's fence (docs/handlers.md, "Fencing your writes"): checks, in
-- the handler's own transaction, that the worker that handed it the event
-- still owns the event's slot at the event's epoch, and raises PQ001 when
-- it does not. The fence is "<queue>/<group>/<slots>/<slot>/<epoch>"
-- (queue and group names hold no "/"). Like check_owner, it holds the
-- slot's row (for share) until the caller's transaction ends, so that no
-- other worker takes the slot between the check and the commit.
create or replace function partitionq.fence(p_fence text)
returns void language plpgsql security definer set search_path = pg_catalog, pg_temp as $f$
declare
    v_part text[] := string_to_array(p_fence, '/');
begin
    if p_fence is null or cardinality(v_part) <> 5 or v_part[1] = '' or v_part[2] = ''
       or v_part[3] !~ '^[0-9]{1,4}$' or v_part[4] !~ '^[0-9]{1,4}$' or v_part[5] !~ '^[0-9]{1,18}$' then
        raise exception 'partitionq.fence: % is not a fence: give the one the event carries, <queue>/<group>/<slots>/<slot>/<epoch> (PARTITIONQ_FENCE, the ce-partitionqfence header, the pipe''s "fence")',
              coalesce(quote_literal(left(p_fence, 200)), 'null') using errcode = '22023';
    end if;
    if not partitionq.check_owner(v_part[1], v_part[2], v_part[3]::int, v_part[4]::int, v_part[5]::bigint) then
        raise exception 'slot % of % of group % on queue % is no longer owned at epoch %: the worker that handed out this event lost the slot; roll back (the slot''s new owner handles the event again)',
              v_part[4], v_part[3], v_part[2], v_part[1], v_part[5] using errcode = 'PQ001';
    end if;
end
$f$;
revoke all on function partitionq.fence(text) from public;
