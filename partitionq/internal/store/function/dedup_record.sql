-- A send records the events it inserted for the dedup ids it claimed:
-- p_ev_ids[i] for p_ids[i]. Each id must be claimed and not yet recorded,
-- and each event inserted into queue p_queue by the current transaction
-- with the claim's key (PQ002 otherwise); returns the count. The records
-- are found through the primary key alone (dedup_id = any), whatever the
-- table's statistics say of ev_id; the pairs are looked up in jsonb maps.
create or replace function partitionq.dedup_record(p_engine text, p_queue text, p_ids text[], p_ev_ids bigint[])
returns int language plpgsql security definer set search_path = pg_catalog, partitionq, pg_temp as $f$
declare
    v_n    int := coalesce(cardinality(p_ids), 0);
    v_ev   jsonb; -- dedup id -> event id
    v_key  jsonb; -- event id -> its key, for the events this transaction inserted
    v_done text[];
    v_bad  text;
begin
    if p_queue is null or coalesce(cardinality(p_ev_ids), 0) <> v_n then
        raise exception 'dedup_record needs a queue and one event per dedup id' using errcode = '22023';
    end if;
    if v_n = 0 then
        return 0;
    end if;
    select jsonb_object_agg(u.id, u.ev) into v_ev from unnest(p_ids, p_ev_ids) u(id, ev);
    select coalesce(jsonb_object_agg(e.ev_id::text, coalesce(e.ev_key, '')), '{}') into v_key
      from partitionq.engine_own_events(p_engine, p_queue, p_ev_ids) e;
    with upd as (
        update partitionq.dedup d set ev_id = (v_ev ->> d.dedup_id)::bigint
         where d.queue = p_queue and d.dedup_id = any(p_ids) and d.ev_id is null
           and d.key = v_key ->> (v_ev ->> d.dedup_id)
        returning d.dedup_id)
    select array_agg(upd.dedup_id) into v_done from upd;
    if coalesce(cardinality(v_done), 0) <> v_n then
        select u.id into v_bad from unnest(p_ids) u(id) where u.id <> all(coalesce(v_done, '{}')) limit 1;
        raise exception 'dedup id % of queue % is not this transaction''s to record: a send claims it (dedup_claim), inserts its event with the claim''s key, then records it, in one transaction',
              coalesce(v_bad, '(repeated)'), p_queue using errcode = 'PQ002';
    end if;
    return v_n;
end
$f$;
revoke all on function partitionq.dedup_record(text, text, text[], bigint[]) from public;
