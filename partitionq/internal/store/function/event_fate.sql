-- What became of event p_ev_id for slot consumer p_consumer of queue
-- p_queue, as far as the engine's tables tell, without its payload:
--   'set_aside'   it is in the consumer's retry queue (parked, or a timed retry)
--   'finished'    it is in the event tables, and the consumer's last finished
--                 tick includes it: handled (it is neither set aside nor, the
--                 caller checks, a dead letter)
--   'unfinished'  it is in the event tables, after the consumer's position
--   'other_key'   it is an event of another key than p_key
--   'no_event'    the queue never had it (its id is past the queue's newest),
--                 or its ticks hold no such event
--   'unknown'     older than every tick the engine keeps (rotated away)
--   'no_consumer' no such consumer of the queue
-- The event is looked up by ev_id within the transactions that can hold it:
-- its transaction had not committed at the last tick before the id was
-- handed out (tick_event_seq < id), so its txid is at least that tick's
-- xmin; and it had started at the first tick after (tick_event_seq >= id),
-- so its txid is below that tick's xmax. Those bounds use the event
-- tables' txid index: the cost is the events of a few ticks, whatever the
-- backlog.
--
-- An event not found below the upper bound is looked up again without it
-- (the operator's rare path: a scan from the lower tick on): an event
-- takes its id before its transaction takes a txid, so the first tick that
-- recorded the id as handed out can come before the txid; likewise for a
-- queue's first event when the queue ticked before it was sent.
create or replace function partitionq.event_fate(p_engine text, p_queue text, p_consumer text, p_key text, p_ev_id bigint)
returns text language plpgsql stable security definer set search_path = pg_catalog, partitionq, pg_temp as $f$
declare
    v_qid   int;
    v_pfx   text;
    v_seq   text;
    v_sub   int;
    v_last  bigint;
    v_lo    text;
    v_hi    text;
    v_try   int;
    v_key   text;
    v_done  boolean;
    v_head  bigint;
    v_rows  bigint;
    v_xmin  text := case p_engine when 'pgq' then 'txid_snapshot_xmin' else 'pg_snapshot_xmin' end;
    v_xmax  text := case p_engine when 'pgq' then 'txid_snapshot_xmax' else 'pg_snapshot_xmax' end;
    v_vis   text := case p_engine when 'pgq' then 'txid_visible_in_snapshot' else 'pg_visible_in_snapshot' end;
begin
    if p_engine is null or p_engine not in ('pgq', 'pgque') then
        raise exception 'unknown engine schema %: pgq or pgque', p_engine using errcode = '22023';
    end if;
    execute format('select q.queue_id, q.queue_data_pfx, q.queue_event_seq, s.sub_id, s.sub_last_tick
          from %1$I.queue q join %1$I.subscription s on s.sub_queue = q.queue_id
          join %1$I.consumer c on c.co_id = s.sub_consumer
         where q.queue_name = $1 and c.co_name = $2', p_engine)
        into v_qid, v_pfx, v_seq, v_sub, v_last using p_queue, p_consumer;
    if v_qid is null then
        return 'no_consumer';
    end if;
    execute format('select ev_extra1 from %I.retry_queue where ev_owner = $1 and ev_id = $2', p_engine)
        into v_key using v_sub, p_ev_id;
    get diagnostics v_rows = row_count; -- EXECUTE sets no FOUND
    if v_rows > 0 then
        return case when v_key is not distinct from p_key then 'set_aside' else 'other_key' end;
    end if;
    execute format('select last_value from %s', v_seq) into v_head;
    if p_ev_id < 1 or p_ev_id > v_head then
        return 'no_event';
    end if;
    -- (The queue's first tick, made by create_queue before any event, has
    -- the sequence's start as its tick_event_seq: no id was handed out.)
    execute format('select %2$s(tick_snapshot)::text from %1$I.tick where tick_queue = $1
           and case when tick_id = 1 then 0 else tick_event_seq end < $2
         order by tick_id desc limit 1', p_engine, v_xmin) into v_lo using v_qid, p_ev_id;
    if v_lo is null then
        return 'unknown';
    end if;
    execute format('select %2$s(tick_snapshot)::text from %1$I.tick where tick_queue = $1
           and case when tick_id = 1 then 0 else tick_event_seq end >= $2
         order by tick_id limit 1', p_engine, v_xmax) into v_hi using v_qid, p_ev_id;
    for v_try in 1..2 loop
        execute format('select e.ev_extra1, %3$s(e.ev_txid, t.tick_snapshot)
              from %1$s e, %2$I.tick t
             where t.tick_queue = $4 and t.tick_id = $5
               and e.ev_txid >= $1::text::%4$s and ($2 is null or e.ev_txid < $2::text::%4$s) and e.ev_id = $3
               and (e.ev_owner is null or e.ev_owner = $6)
             limit 1', v_pfx, p_engine, v_vis, case p_engine when 'pgq' then 'bigint' else 'xid8' end)
            into v_key, v_done using v_lo, v_hi, p_ev_id, v_qid, v_last, v_sub;
        get diagnostics v_rows = row_count;
        exit when v_rows > 0 or v_hi is null;
        -- Not below the bound: its transaction may have taken its txid
        -- after that tick, though it had its id before (or, for a queue's
        -- first event, the tick was an empty one that read the sequence's
        -- start). Again, unbounded.
        v_hi := null;
    end loop;
    if v_rows = 0 then
        return 'no_event';
    end if;
    if v_key is distinct from p_key then
        return 'other_key';
    end if;
    return case when v_done then 'finished' else 'unfinished' end;
end
$f$;
revoke all on function partitionq.event_fate(text, text, text, text, bigint) from public;
