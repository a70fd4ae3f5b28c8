-- The fencing token, for handlers' own transactions: is slot p_slot of the
-- group's generation of p_n slots still owned at epoch p_epoch? A group's
-- epochs are unique across its generations (a generation's start at its
-- number times 2^32), so the epoch names the generation too: after a
-- resize back to an N the group had before, an epoch of the earlier
-- generation matches no row. The row stays locked for share until the
-- caller's transaction ends, so a takeover waits for it.
create or replace function partitionq.check_owner(p_queue text, p_grp text, p_n int, p_slot int, p_epoch bigint)
returns boolean language plpgsql security definer set search_path = pg_catalog, pg_temp as $f$
begin
    return partitionq.owner_generation(p_queue, p_grp, p_n, p_slot, p_epoch) is not null;
end
$f$;
revoke all on function partitionq.check_owner(text, text, int, int, bigint) from public;
