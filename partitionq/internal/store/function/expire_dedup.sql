-- Deletes up to p_limit expired dedup records, oldest first, skipping rows
-- a send holds; returns how many. Bounded work: call it again while it
-- returns p_limit. partitionq's ticker does (docs/operations.md); under
-- pgqd, run it from cron.
create or replace function partitionq.expire_dedup(p_limit int default 5000)
returns int language plpgsql security definer set search_path = pg_catalog, partitionq, pg_temp as $f$
declare
    v_n int;
begin
    if p_limit is null or p_limit < 1 then
        raise exception 'expire_dedup deletes at most p_limit records: give 1 or more' using errcode = '22023';
    end if;
    delete from partitionq.dedup
     where ctid = any(array(select x.ctid from partitionq.dedup x
                             where x.expires_at <= statement_timestamp()
                             order by x.expires_at limit p_limit
                               for update skip locked));
    get diagnostics v_n = row_count;
    return v_n;
end
$f$;
revoke all on function partitionq.expire_dedup(int) from public;
