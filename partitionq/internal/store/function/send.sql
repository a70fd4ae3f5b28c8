-- A send from any language (docs/handlers.md, "Producing in SQL"): one
-- event of key to queue, in the caller's transaction, by the rules of the
-- Go client's Send (partitionq/send.go, names.go, dedup.go): the same
-- checks, the same event, the same dedup protocol (dedup_claim, the
-- insert, dedup_record). Returns the event's id and false, or, for a
-- dedup id sent to the queue within its window, the first event's id and
-- true (nothing inserted). The engine is the one installed (engine =>
-- 'pgq' or 'pgque' when both are). Refuses what the Go client refuses
-- (22023: a bad queue name, an empty or long key, a long type or dedup
-- id, a window without a dedup id or out of range; 42704: no such queue;
-- PQ010: a dedup id sent before with another key). SECURITY DEFINER, as
-- every function granted to a role: it inserts as the schema's owner, so
-- a producer needs nothing else.
create or replace function partitionq.send(queue text, key text, type text default null, payload text default null,
    dedup_id text default null, dedup_window interval default null, engine text default null,
    out event_id bigint, out duplicate boolean)
language plpgsql security definer set search_path = pg_catalog, pg_temp as $f$
declare
    v_engine text := send.engine;
    v_dedup  text := nullif(send.dedup_id, '');
    v_claim  record;
    v_found  boolean;
begin
    if send.queue is null or send.queue !~ '^[A-Za-z0-9][A-Za-z0-9_.-]*$' or octet_length(send.queue) > 48 then
        raise exception 'partitionq.send: invalid queue name %: give a name of letters, digits, ''_'', ''.'' or ''-'', 48 bytes at most',
              coalesce(quote_literal(left(send.queue, 60)), 'null') using errcode = '22023';
    end if;
    if send.key is null or send.key = '' then
        raise exception 'partitionq.send: invalid key %: it is empty: give every event a partition key (for example the tenant id)',
              coalesce(quote_literal(send.key), 'null') using errcode = '22023';
    end if;
    if octet_length(send.key) > 512 then
        raise exception 'partitionq.send: invalid key %...: it is % bytes long, more than 512: shorten it',
              quote_literal(left(send.key, 48)), octet_length(send.key) using errcode = '22023';
    end if;
    if octet_length(send.type) > 256 then
        raise exception 'partitionq.send: invalid type %...: it is % bytes long, more than 256: shorten it',
              quote_literal(left(send.type, 48)), octet_length(send.type) using errcode = '22023';
    end if;
    if send.dedup_window is not null and v_dedup is null then
        raise exception 'partitionq.send: invalid dedup window %: it is given without a dedup id, and only a dedup id has a window: give the message a dedup id too, or leave the window out',
              send.dedup_window using errcode = '22023';
    end if;
    if octet_length(v_dedup) > 512 then
        raise exception 'partitionq.send: invalid dedup id %...: it is % bytes long, more than 512: shorten it',
              quote_literal(left(v_dedup, 48)), octet_length(v_dedup) using errcode = '22023';
    end if;
    if send.dedup_window < interval '1 millisecond' or send.dedup_window > interval '7 days' then
        raise exception 'partitionq.send: invalid dedup window %: a dedup window is from 1 millisecond to 7 days: give a duration in that range, or null for the queue''s window',
              send.dedup_window using errcode = '22023';
    end if;
    if v_engine is null then
        if to_regprocedure('pgq.insert_event(text,text,text,text,text,text,text)') is not null then
            v_engine := 'pgq';
        end if;
        if to_regprocedure('pgque.insert_event(text,text,text,text,text,text,text)') is not null then
            if v_engine is not null then
                raise exception 'partitionq.send: both PgQ and PgQue are installed in this database: name the engine of queue %: engine => ''pgq'' or engine => ''pgque''',
                      send.queue using errcode = '22023';
            end if;
            v_engine := 'pgque';
        end if;
        if v_engine is null then
            raise exception 'partitionq.send: no queue engine in this database (neither pgq nor pgque): install PgQ or PgQue, then run partitionq setup'
                  using errcode = '42704';
        end if;
    elsif v_engine not in ('pgq', 'pgque') then
        raise exception 'partitionq.send: unknown engine %: pgq or pgque', quote_literal(v_engine) using errcode = '22023';
    end if;
    execute format('select exists (select 1 from %I.queue where queue_name = $1)', v_engine) into v_found using send.queue;
    if not v_found then
        raise exception 'partitionq.send: no such queue %: create it and its group with partitionq setup --queue % --group G --slots N',
              quote_literal(send.queue), send.queue using errcode = '42704';
    end if;

    duplicate := false;
    if v_dedup is not null then
        -- The send claims its dedup id before it inserts anything; a live
        -- record is a duplicate (its hit counted); a concurrent claim of
        -- the same id waits for this transaction's outcome.
        select c.claimed, c.ev_id, c.key into v_claim
          from partitionq.dedup_claim(send.queue, array[v_dedup], array[send.key], array[1],
                                      array[(extract(epoch from send.dedup_window) * 1000000)::bigint], true) c;
        if not v_claim.claimed then
            if v_claim.key is distinct from send.key then
                raise exception 'partitionq.send: dedup id % of queue % was sent with key % as event %, not with key %: a dedup id names one message, and a retry has its key: give this message a dedup id of its own, or send it with key %',
                      quote_literal(left(v_dedup, 48)), quote_literal(send.queue), quote_literal(left(v_claim.key, 48)), v_claim.ev_id,
                      quote_literal(left(send.key, 48)), quote_literal(left(v_claim.key, 48)) using errcode = 'PQ010';
            end if;
            event_id := v_claim.ev_id;
            duplicate := true;
            return;
        end if;
    end if;
    execute format('select %I.insert_event($1, $2, $3, $4, null, null, null)', v_engine) into event_id
      using send.queue, coalesce(send.type, ''), coalesce(send.payload, ''), send.key;
    if v_dedup is not null then
        perform partitionq.dedup_record(v_engine, send.queue, array[v_dedup], array[event_id]);
    end if;
end
$f$;
revoke all on function partitionq.send(text, text, text, text, text, interval, text) from public;
