-- N of a slot consumer name "<group>#<slot>/<N>", checked against the group and slot.
create or replace function partitionq.slot_count(p_grp text, p_slot int, p_consumer text)
returns int language plpgsql immutable set search_path = pg_catalog, pg_temp as $f$
declare
    v_n int;
begin
    v_n := substring(p_consumer from '/([0-9]{1,9})$')::int;
    if v_n is null or v_n < 1 or p_slot is null or p_slot < 0 or p_slot >= v_n
       or p_consumer is distinct from p_grp || '#' || p_slot || '/' || v_n then
        raise exception 'consumer % is not slot % of group %', p_consumer, p_slot, p_grp using errcode = '22023';
    end if;
    return v_n;
end
$f$;
revoke all on function partitionq.slot_count(text, int, text) from public;
