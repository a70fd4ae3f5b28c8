-- partitionq's schema at version 5, for the migration test: a database
-- that store.MigrateTo built to version 5 at commit b15ac94, dumped with
-- pg_dump --schema-only --schema=partitionq --no-owner (PostgreSQL 15),
-- its rows with --data-only --inserts. Cleaned to run in a transaction:
-- pg_dump's session settings and object headers left out, the tables
-- before the functions (SQL functions are checked against them when
-- created), then triggers and rights. Frozen: do not edit.

CREATE SCHEMA partitionq;

CREATE TABLE partitionq.audit (
    id bigint NOT NULL,
    at timestamp with time zone DEFAULT now() NOT NULL,
    db_role text DEFAULT SESSION_USER NOT NULL,
    actor text DEFAULT ''::text NOT NULL,
    action text NOT NULL,
    queue text NOT NULL,
    grp text NOT NULL,
    key text,
    ev_id bigint,
    reason text DEFAULT ''::text NOT NULL,
    outcome text DEFAULT ''::text NOT NULL
);

CREATE SEQUENCE partitionq.audit_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE partitionq.audit_id_seq OWNED BY partitionq.audit.id;

CREATE TABLE partitionq.dead_letter (
    id bigint NOT NULL,
    queue text NOT NULL,
    grp text NOT NULL,
    slot integer NOT NULL,
    ev_id bigint NOT NULL,
    ev_time timestamp with time zone NOT NULL,
    ev_type text NOT NULL,
    ev_data text NOT NULL,
    key text NOT NULL,
    attempts integer NOT NULL,
    last_error text DEFAULT ''::text NOT NULL,
    reason text NOT NULL,
    actor text DEFAULT ''::text NOT NULL,
    db_role text DEFAULT SESSION_USER NOT NULL,
    dead_at timestamp with time zone DEFAULT now() NOT NULL,
    replayed_at timestamp with time zone,
    replay_ev_id bigint,
    slots integer
);

CREATE SEQUENCE partitionq.dead_letter_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE partitionq.dead_letter_id_seq OWNED BY partitionq.dead_letter.id;

CREATE TABLE partitionq.failure (
    queue text NOT NULL,
    consumer text NOT NULL,
    ev_id bigint NOT NULL,
    attempts integer NOT NULL,
    last_error text DEFAULT ''::text NOT NULL,
    first_failed_at timestamp with time zone DEFAULT now() NOT NULL,
    last_failed_at timestamp with time zone DEFAULT now() NOT NULL,
    next_attempt_at timestamp with time zone NOT NULL,
    flagged_at timestamp with time zone
);

CREATE TABLE partitionq.generation (
    queue text NOT NULL,
    grp text NOT NULL,
    slots integer NOT NULL,
    number integer NOT NULL,
    parent_slots integer,
    parent_subs integer[] DEFAULT '{}'::integer[] NOT NULL,
    resize_txid bigint,
    resize_after bigint,
    cutover_tick bigint,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    created_by text DEFAULT SESSION_USER NOT NULL,
    actor text DEFAULT ''::text NOT NULL,
    reason text DEFAULT ''::text NOT NULL,
    CONSTRAINT generation_slots_check CHECK (((slots >= 1) AND (slots <= 256)))
);

CREATE TABLE partitionq.schema_version (
    version integer NOT NULL
);

CREATE TABLE partitionq.slot (
    queue text NOT NULL,
    grp text NOT NULL,
    slot integer NOT NULL,
    n integer NOT NULL,
    worker_id bigint,
    epoch bigint DEFAULT 0 NOT NULL,
    since timestamp with time zone
);

CREATE TABLE partitionq.slot_done (
    queue text NOT NULL,
    grp text NOT NULL,
    slot integer NOT NULL,
    batch_id bigint NOT NULL,
    ev_id bigint NOT NULL,
    n integer NOT NULL
);

CREATE TABLE partitionq.slot_progress (
    queue text NOT NULL,
    grp text NOT NULL,
    slot integer NOT NULL,
    batch_id bigint,
    done_below bigint DEFAULT 0 NOT NULL,
    done bytea DEFAULT '\x'::bytea NOT NULL,
    handled bigint DEFAULT 0 NOT NULL,
    failed bigint DEFAULT 0 NOT NULL,
    updated_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    finished_at timestamp with time zone,
    n integer NOT NULL
);

CREATE TABLE partitionq.slot_rate (
    queue text NOT NULL,
    grp text NOT NULL,
    slot integer NOT NULL,
    sec bigint NOT NULL,
    handled bigint DEFAULT 0 NOT NULL,
    failed bigint DEFAULT 0 NOT NULL,
    n integer NOT NULL
);

CREATE TABLE partitionq.ticker_turn (
    name text NOT NULL,
    holder text,
    until timestamp with time zone
);

CREATE TABLE partitionq.worker (
    id bigint NOT NULL,
    identity text NOT NULL,
    host text DEFAULT ''::text NOT NULL,
    os_pid integer DEFAULT 0 NOT NULL,
    db_role text DEFAULT SESSION_USER NOT NULL,
    backend_pid integer,
    backend_start timestamp with time zone,
    started_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    renewed_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    lease_until timestamp with time zone NOT NULL,
    schema_version integer
);

CREATE SEQUENCE partitionq.worker_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE partitionq.worker_id_seq OWNED BY partitionq.worker.id;

ALTER TABLE ONLY partitionq.audit ALTER COLUMN id SET DEFAULT nextval('partitionq.audit_id_seq'::regclass);

ALTER TABLE ONLY partitionq.dead_letter ALTER COLUMN id SET DEFAULT nextval('partitionq.dead_letter_id_seq'::regclass);

ALTER TABLE ONLY partitionq.worker ALTER COLUMN id SET DEFAULT nextval('partitionq.worker_id_seq'::regclass);

ALTER TABLE ONLY partitionq.audit
    ADD CONSTRAINT audit_pkey PRIMARY KEY (id);

ALTER TABLE ONLY partitionq.dead_letter
    ADD CONSTRAINT dead_letter_pkey PRIMARY KEY (id);

ALTER TABLE ONLY partitionq.failure
    ADD CONSTRAINT failure_pkey PRIMARY KEY (queue, consumer, ev_id);

ALTER TABLE ONLY partitionq.generation
    ADD CONSTRAINT generation_pkey PRIMARY KEY (queue, grp, slots);

ALTER TABLE ONLY partitionq.slot_done
    ADD CONSTRAINT slot_done_pkey PRIMARY KEY (queue, grp, n, slot, ev_id);

ALTER TABLE ONLY partitionq.slot
    ADD CONSTRAINT slot_pkey PRIMARY KEY (queue, grp, n, slot);

ALTER TABLE ONLY partitionq.slot_progress
    ADD CONSTRAINT slot_progress_pkey PRIMARY KEY (queue, grp, n, slot);

ALTER TABLE ONLY partitionq.slot_rate
    ADD CONSTRAINT slot_rate_pkey PRIMARY KEY (queue, grp, n, slot, sec);

ALTER TABLE ONLY partitionq.ticker_turn
    ADD CONSTRAINT ticker_turn_pkey PRIMARY KEY (name);

ALTER TABLE ONLY partitionq.worker
    ADD CONSTRAINT worker_pkey PRIMARY KEY (id);

CREATE INDEX audit_group ON partitionq.audit USING btree (queue, grp, id);

CREATE UNIQUE INDEX dead_letter_event ON partitionq.dead_letter USING btree (queue, grp, ev_id);

CREATE INDEX dead_letter_group ON partitionq.dead_letter USING btree (queue, grp, id);

CREATE INDEX slot_worker ON partitionq.slot USING btree (worker_id);

CREATE FUNCTION partitionq.check_owner(p_queue text, p_grp text, p_n integer, p_slot integer, p_epoch bigint) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
    perform 1 from partitionq.slot
     where queue = p_queue and grp = p_grp and n = p_n and slot = p_slot and epoch = p_epoch and worker_id is not null
       for share;
    return found;
end
$$;

CREATE FUNCTION partitionq.engine_events(p_engine text, p_queue text, p_consumer text, p_n integer, p_slot integer, p_ids bigint[]) RETURNS TABLE(ev_id bigint, ev_time timestamp with time zone, ev_retry integer, ev_type text, ev_data text, ev_key text, parked boolean)
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
declare
    v_sub   int;
    v_batch bigint;
    v_sql   text;
    v_found bigint[];
    v_rest  bigint[];
    v_slot  constant text := '(case when ev_extra1 is null then 0 else (hashtextextended(ev_extra1, 0) %% $3 + $3) %% $3 end) = $4';
    v_retry text;
begin
    if p_engine is null or p_engine not in ('pgq', 'pgque') then
        raise exception 'unknown engine schema %: pgq or pgque', p_engine using errcode = '22023';
    end if;
    execute format('select s.sub_id, s.sub_batch from %1$I.subscription s join %1$I.queue q on q.queue_id = s.sub_queue
                     join %1$I.consumer c on c.co_id = s.sub_consumer where q.queue_name = $1 and c.co_name = $2', p_engine)
       into v_sub, v_batch using p_queue, p_consumer;
    if v_sub is null then
        return;
    end if;
    v_retry := format('select r.ev_id, r.ev_time, coalesce(r.ev_retry, 0)::int, coalesce(r.ev_type, ''''),
            coalesce(r.ev_data, ''''), r.ev_extra1, true from %I.retry_queue r
         where r.ev_owner = $1 and r.ev_id = any($2) and ' || replace(v_slot, 'ev_extra1', 'r.ev_extra1'), p_engine);
    execute 'select array_agg(x.ev_id) from (' || v_retry || ') x' into v_found using v_sub, p_ids, p_n, p_slot;
    return query execute v_retry using v_sub, p_ids, p_n, p_slot;
    -- Only the events not in the retry queue are looked for in the batch
    -- (a parked event's drain may run while the slot's batch is finished).
    v_rest := array(select unnest(p_ids) except select unnest(v_found));
    if v_batch is null or cardinality(v_rest) = 0 then
        return;
    end if;
    begin
        execute format('select %I.batch_event_sql($1)', p_engine) into v_sql using v_batch;
    exception when raise_exception then
        return; -- finished since ("Cannot find data for batch"): none of it is open
    end;
    return query execute format('select e.ev_id, e.ev_time, coalesce(e.ev_retry, 0)::int, coalesce(e.ev_type, ''''),
            coalesce(e.ev_data, ''''), e.ev_extra1, false from (%s) e
         where e.ev_id = any($2) and ' || replace(v_slot, 'ev_extra1', 'e.ev_extra1'), v_sql)
        using v_sub, v_rest, p_n, p_slot;
end
$_$;

CREATE FUNCTION partitionq.engine_first_tick_seeing(p_engine text, p_queue text, p_after bigint, p_txid bigint) RETURNS bigint
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
declare
    v_tick bigint;
    v_seen text;
begin
    if p_engine = 'pgq' then
        v_seen := 'txid_visible_in_snapshot($2, t.tick_snapshot)';
    elsif p_engine = 'pgque' then
        v_seen := 'pg_visible_in_snapshot($2::text::xid8, t.tick_snapshot)';
    else
        raise exception 'unknown engine schema %: pgq or pgque', p_engine using errcode = '22023';
    end if;
    execute format('select min(t.tick_id) from %1$I.tick t join %1$I.queue q on q.queue_id = t.tick_queue
                     where q.queue_name = $1 and t.tick_id > $3 and ' || v_seen, p_engine)
       into v_tick using p_queue, p_txid, p_after;
    return v_tick;
end
$_$;

CREATE FUNCTION partitionq.engine_own_event(p_engine text, p_queue text, p_ev_id bigint) RETURNS TABLE(ev_type text, ev_data text, ev_key text)
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
declare
    v_pfx text;
begin
    if p_engine is null or p_engine not in ('pgq', 'pgque') then
        raise exception 'unknown engine schema %: pgq or pgque', p_engine using errcode = '22023';
    end if;
    execute format('select queue_data_pfx from %I.queue where queue_name = $1', p_engine) into v_pfx using p_queue;
    if v_pfx is null then
        return;
    end if;
    -- ev_txid is the inserting transaction's (PgQ: bigint, PgQue: xid8).
    return query execute format('select coalesce(ev_type, ''''), coalesce(ev_data, ''''), ev_extra1 from %s
         where ev_id = $1 and ev_txid = %s', v_pfx,
         case p_engine when 'pgq' then 'txid_current()' else 'pg_current_xact_id()' end)
        using p_ev_id;
end
$_$;

CREATE FUNCTION partitionq.engine_sub(p_engine text, p_queue text, p_consumer text, OUT sub_id integer, OUT last_tick bigint, OUT batch_id bigint) RETURNS record
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
begin
    if p_engine is null or p_engine not in ('pgq', 'pgque') then
        raise exception 'unknown engine schema %: pgq or pgque', p_engine using errcode = '22023';
    end if;
    execute format('select s.sub_id, s.sub_last_tick, s.sub_batch from %1$I.subscription s join %1$I.queue q on q.queue_id = s.sub_queue
                     join %1$I.consumer c on c.co_id = s.sub_consumer where q.queue_name = $1 and c.co_name = $2', p_engine)
       into sub_id, last_tick, batch_id using p_queue, p_consumer;
end
$_$;

CREATE FUNCTION partitionq.ensure_generation(p_engine text, p_queue text, p_grp text) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
declare
    v_n  int;
    v_ns int;
begin
    if exists (select 1 from partitionq.generation where queue = p_queue and grp = p_grp) then
        return;
    end if;
    if p_engine is null or p_engine not in ('pgq', 'pgque') then
        raise exception 'unknown engine schema %: pgq or pgque', p_engine using errcode = '22023';
    end if;
    execute format('select count(distinct x.n), min(x.n)
                      from (select split_part(substring(c.co_name from length($2) + 2), ''/'', 2)::int as n
                              from %1$I.subscription s join %1$I.queue q on q.queue_id = s.sub_queue
                              join %1$I.consumer c on c.co_id = s.sub_consumer
                             where q.queue_name = $1 and left(c.co_name, length($2) + 1) = $2 || ''#''
                               and substring(c.co_name from length($2) + 2) ~ ''^[0-9]{1,9}/[0-9]{1,9}$'') x', p_engine)
       into v_ns, v_n using p_queue, p_grp;
    if v_ns = 0 then
        raise exception 'no consumer group % on queue %: run partitionq setup first', p_grp, p_queue using errcode = 'PQ006';
    end if;
    if v_ns > 1 then
        raise exception 'group % on queue % has engine consumers for several numbers of slots and no record of a resize: unregister the stray consumers (docs/operations.md)',
              p_grp, p_queue using errcode = 'PQ006';
    end if;
    insert into partitionq.generation (queue, grp, slots, number, reason)
    values (p_queue, p_grp, v_n, 1, 'the group as set up') on conflict do nothing;
    insert into partitionq.slot (queue, grp, n, slot) select p_queue, p_grp, v_n, s from generate_series(0, v_n - 1) s
        on conflict do nothing;
end
$_$;

CREATE FUNCTION partitionq.give_up(p_engine text, p_queue text, p_grp text, p_slot integer, p_consumer text, p_ev_ids bigint[], p_attempts integer[], p_errors text[], p_reasons text[]) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'partitionq', 'pg_temp'
    AS $$
declare
    v_n       int := partitionq.slot_count(p_grp, p_slot, p_consumer);
    v_count   int;
    v_missing bigint[];
begin
    if p_queue is null or p_ev_ids is null
       or cardinality(p_ev_ids) is distinct from cardinality(p_attempts)
       or cardinality(p_ev_ids) is distinct from cardinality(p_errors)
       or cardinality(p_ev_ids) is distinct from cardinality(p_reasons) then
        raise exception 'give_up needs a queue, the events, and one attempt count, error and reason per event' using errcode = '22023';
    end if;
    if exists (select 1 from unnest(p_reasons) r where r is null or r not in ('handler', 'max_attempts', 'max_blocked')) then
        raise exception 'a worker gives an event up for handler, max_attempts or max_blocked only: skip and quarantine are an operator''s (set_aside)'
              using errcode = '22023';
    end if;
    with ev as materialized (
        select distinct on (e.ev_id) e.*
          from partitionq.engine_events(p_engine, p_queue, p_consumer, v_n, p_slot, p_ev_ids) e
         order by e.ev_id, e.parked desc),
    ins as (
        insert into partitionq.dead_letter (queue, grp, slot, slots, ev_id, ev_time, ev_type, ev_data, key, attempts,
                                            last_error, reason, actor, db_role)
        select p_queue, p_grp, p_slot, v_n, ev.ev_id, ev.ev_time, ev.ev_type, ev.ev_data, coalesce(ev.ev_key, ''),
               greatest(coalesce(u.att, 0), ev.ev_retry), coalesce(u.err, ''), u.rsn, 'worker', session_user
          from unnest(p_ev_ids, p_attempts, p_errors, p_reasons) u(id, att, err, rsn) join ev on ev.ev_id = u.id
         order by ev.ev_id -- dead letters' ids in event order
            on conflict (queue, grp, ev_id) do nothing
        returning 1)
    select (select count(*) from ins),
           array(select u.id from unnest(p_ev_ids) u(id) where not exists (select 1 from ev where ev.ev_id = u.id))
      into v_count, v_missing;
    if cardinality(v_missing) > 0 then
        raise exception 'event % of queue % is not slot % of group %''s to give up: it is neither in the slot''s open batch nor in its retry queue',
              v_missing[1], p_queue, p_slot, p_grp using errcode = 'PQ002';
    end if;
    return v_count;
end
$$;

CREATE FUNCTION partitionq.purge_dead_letters(p_queue text, p_grp text, p_ids bigint[], p_before timestamp with time zone, p_reason text, p_actor text, p_note text, OUT purged bigint, OUT audit_id bigint) RETURNS record
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'partitionq', 'pg_temp'
    AS $$
declare
    v_key text;
begin
    if p_queue is null or p_grp is null then
        raise exception 'purge_dead_letters needs a queue and a group' using errcode = '22023';
    end if;
    with gone as (
        delete from partitionq.dead_letter
         where queue = p_queue and grp = p_grp and (p_ids is null or id = any(p_ids)) and (p_before is null or dead_at < p_before)
        returning key)
    select count(*), case when count(distinct key) = 1 then min(key) end into purged, v_key from gone;
    insert into partitionq.audit (db_role, actor, action, queue, grp, key, reason, outcome)
    values (session_user, coalesce(p_actor, ''), 'purge', p_queue, p_grp, v_key, coalesce(p_reason, ''),
            'purged ' || purged || coalesce(' (' || nullif(p_note, '') || ')', ''))
    returning id into audit_id;
end
$$;

CREATE FUNCTION partitionq.record_action(p_actor text, p_action text, p_queue text, p_grp text, p_key text, p_ev_id bigint, p_reason text, p_outcome text) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'partitionq', 'pg_temp'
    AS $$
declare
    v_id bigint;
begin
    if p_queue is null or p_grp is null or p_action is null or p_outcome is null then
        raise exception 'record_action needs a queue, a group, an action and its outcome' using errcode = '22023';
    end if;
    if p_action = 'drop_group' then
        -- recorded in the transaction of the drop, once the group's slots are gone
        if p_outcome not like 'dropped %' or exists (select 1 from partitionq.slot where queue = p_queue and grp = p_grp) then
            raise exception 'group % of queue % is not dropped: its slots are still recorded', p_grp, p_queue using errcode = 'PQ002';
        end if;
    elsif (p_action, p_outcome) not in (('retry', 'retry_scheduled'), ('retry', 'already_resolved'), ('skip', 'already_resolved'),
                                     ('quarantine', 'already_resolved'), ('replay', 'already_replayed')) then
        raise exception 'record_action does not record % with outcome %: skips and quarantines are recorded by set_aside, replays by record_replay, purges by purge_dead_letters',
              p_action, p_outcome using errcode = 'PQ002';
    end if;
    insert into partitionq.audit (db_role, actor, action, queue, grp, key, ev_id, reason, outcome)
    values (session_user, coalesce(p_actor, ''), p_action, p_queue, p_grp, p_key, p_ev_id, coalesce(p_reason, ''), p_outcome)
    returning id into v_id;
    return v_id;
end
$$;

CREATE FUNCTION partitionq.record_done(p_queue text, p_grp text, p_n integer, p_slot integer, p_epoch bigint, p_batch bigint, p_ev_id bigint) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
    if not partitionq.check_owner(p_queue, p_grp, p_n, p_slot, p_epoch) then
        raise exception 'slot % of % of group % on queue % is not owned at epoch %', p_slot, p_n, p_grp, p_queue, p_epoch
              using errcode = 'PQ001';
    end if;
    insert into partitionq.slot_done (queue, grp, n, slot, batch_id, ev_id)
    values (p_queue, p_grp, p_n, p_slot, p_batch, p_ev_id) on conflict do nothing;
end
$$;

CREATE FUNCTION partitionq.record_replay(p_engine text, p_queue text, p_grp text, p_ids bigint[], p_ev_ids bigint[], p_reason text, p_actor text, p_note text, OUT replayed integer, OUT audit_id bigint) RETURNS record
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'partitionq', 'pg_temp'
    AS $$
declare
    d partitionq.dead_letter;
    e record;
    v_n int := coalesce(cardinality(p_ids), 0);
    v_key text;
    v_keys int := 0;
begin
    if p_queue is null or p_grp is null or p_ids is null or coalesce(cardinality(p_ev_ids), 0) is distinct from v_n then
        raise exception 'record_replay needs a queue, a group and one replay event per dead letter' using errcode = '22023';
    end if;
    for i in 1 .. v_n loop
        select * into d from partitionq.dead_letter where queue = p_queue and grp = p_grp and id = p_ids[i] for update;
        if not found then
            raise exception 'no dead letter % in group % of queue %', p_ids[i], p_grp, p_queue using errcode = 'PQ003';
        end if;
        if d.replayed_at is not null then
            raise exception 'dead letter % was replayed already, as event %', d.id, d.replay_ev_id using errcode = 'PQ004';
        end if;
        select * into e from partitionq.engine_own_event(p_engine, p_queue, p_ev_ids[i]);
        if not found or e.ev_type is distinct from d.ev_type or e.ev_data is distinct from d.ev_data
           or coalesce(e.ev_key, '') is distinct from d.key
           or exists (select 1 from partitionq.dead_letter x where x.queue = p_queue and x.replay_ev_id = p_ev_ids[i]) then
            raise exception 'event % of queue % is not a replay of dead letter %: a replay is sent in the transaction that records it, with the dead letter''s key, type and payload',
                  p_ev_ids[i], p_queue, d.id using errcode = 'PQ002';
        end if;
        update partitionq.dead_letter set replayed_at = now(), replay_ev_id = p_ev_ids[i] where id = d.id;
        if v_keys = 0 or v_key is distinct from d.key then
            v_keys := v_keys + 1;
            v_key := d.key;
        end if;
    end loop;
    insert into partitionq.audit (db_role, actor, action, queue, grp, key, ev_id, reason, outcome)
    values (session_user, coalesce(p_actor, ''), 'replay', p_queue, p_grp,
            case when v_keys = 1 then v_key end, case when v_n = 1 then d.ev_id end, coalesce(p_reason, ''),
            case when v_n = 1 and p_note is null then 'replayed' else 'replayed ' || v_n end
            || coalesce(' (' || nullif(p_note, '') || ')', ''))
    returning id into audit_id;
    replayed := v_n;
end
$$;

CREATE FUNCTION partitionq.refuse_old_worker() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
    if new.schema_version is null or new.schema_version < 5 then
        raise exception 'partitionq''s schema in this database is version 5 or newer, which workers of partitionq before v0.3 do not know (they cannot follow a resize): stop this worker (%, on %) and run partitionq v0.3 or later (docs/operations.md, "Upgrading partitionq''s schema")',
              new.identity, new.host using errcode = 'PQ005';
    end if;
    return new;
end
$$;

CREATE FUNCTION partitionq.resize(p_engine text, p_queue text, p_grp text, p_slots integer, p_actor text, p_reason text) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'partitionq', 'pg_temp'
    AS $_$
declare
    v_gen    partitionq.generation;
    v_newest bigint;
    v_old    text;
begin
    if p_slots is null or p_slots < 1 or p_slots > 256 then
        raise exception 'a group has 1 to 256 slots, not %', p_slots using errcode = '22023';
    end if;
    perform partitionq.ensure_generation(p_engine, p_queue, p_grp);
    -- One resize of a group at a time: its generation rows are locked.
    perform 1 from partitionq.generation where queue = p_queue and grp = p_grp for update;
    if (select count(*) from partitionq.generation where queue = p_queue and grp = p_grp) > 1 then
        select * into v_gen from partitionq.generation where queue = p_queue and grp = p_grp and parent_slots is not null;
        raise exception 'group % on queue % is being resized from % to % slots since % (by %): wait for that resize to end (partitionq resize --wait), or abort it while its cutover has not begun (partitionq resize --abort)',
              p_grp, p_queue, v_gen.parent_slots, v_gen.slots, v_gen.created_at, v_gen.created_by using errcode = 'PQ007';
    end if;
    select * into v_gen from partitionq.generation where queue = p_queue and grp = p_grp;
    if v_gen.slots = p_slots then
        raise exception 'group % on queue % has % slots already: nothing to resize', p_grp, p_queue, p_slots using errcode = 'PQ008';
    end if;
    select string_agg(format('%s on %s (process %s)', w.identity, w.host, w.os_pid), ', ') into v_old
      from partitionq.worker w where w.schema_version is null and w.lease_until > clock_timestamp();
    if v_old is not null then
        raise exception 'workers of partitionq before v0.3 are live (%): they would not stop the old slots at the cutover; stop them first', v_old
              using errcode = 'PQ005';
    end if;
    execute format('select max(t.tick_id) from %1$I.tick t join %1$I.queue q on q.queue_id = t.tick_queue where q.queue_name = $1', p_engine)
       into v_newest using p_queue;
    -- Every old slot has its ownership row until it is handed off.
    insert into partitionq.slot (queue, grp, n, slot) select p_queue, p_grp, v_gen.slots, s from generate_series(0, v_gen.slots - 1) s
        on conflict do nothing;
    insert into partitionq.generation (queue, grp, slots, number, parent_slots, resize_txid, resize_after, actor, reason)
    values (p_queue, p_grp, p_slots, v_gen.number + 1, v_gen.slots, txid_current(), coalesce(v_newest, 0),
            coalesce(p_actor, ''), coalesce(p_reason, ''));
    insert into partitionq.audit (db_role, actor, action, queue, grp, reason, outcome)
    values (session_user, coalesce(p_actor, ''), 'resize', p_queue, p_grp, coalesce(p_reason, ''),
            format('started: %s to %s slots (generation %s)', v_gen.slots, p_slots, v_gen.number + 1));
    perform pg_notify('partitionq_slots', p_queue || '/' || p_grp);
    return v_gen.number + 1;
end
$_$;

CREATE FUNCTION partitionq.resize_abort(p_engine text, p_queue text, p_grp text, p_actor text, p_reason text) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'partitionq', 'pg_temp'
    AS $_$
declare
    v_gen  partitionq.generation;
    v_left int;
begin
    perform 1 from partitionq.generation where queue = p_queue and grp = p_grp for update;
    select * into v_gen from partitionq.generation
     where queue = p_queue and grp = p_grp and parent_slots is not null and resize_txid is not null;
    if not found then
        raise exception 'group % on queue % has no resize in flight: nothing to abort', p_grp, p_queue using errcode = 'PQ002';
    end if;
    select count(*) into v_left from partitionq.slot where queue = p_queue and grp = p_grp and n = v_gen.parent_slots;
    if v_left < v_gen.parent_slots then
        raise exception 'the resize of group % on queue % from % to % slots is past its cutover: % old slots were handed off to the new ones, so it can only complete (partitionq resize --wait)',
              p_grp, p_queue, v_gen.parent_slots, v_gen.slots, v_gen.parent_slots - v_left using errcode = 'PQ009';
    end if;
    if v_gen.cutover_tick is not null then
        for i in 0 .. v_gen.slots - 1 loop
            execute format('select %I.unregister_consumer($1, $2)', p_engine) using p_queue, p_grp || '#' || i || '/' || v_gen.slots;
        end loop;
    end if;
    delete from partitionq.slot_progress where queue = p_queue and grp = p_grp and n = v_gen.slots;
    delete from partitionq.slot_rate where queue = p_queue and grp = p_grp and n = v_gen.slots;
    delete from partitionq.slot where queue = p_queue and grp = p_grp and n = v_gen.slots;
    delete from partitionq.generation where queue = p_queue and grp = p_grp and slots = v_gen.slots;
    insert into partitionq.audit (db_role, actor, action, queue, grp, reason, outcome)
    values (session_user, coalesce(p_actor, ''), 'resize', p_queue, p_grp, coalesce(p_reason, ''),
            format('aborted: %s to %s slots', v_gen.parent_slots, v_gen.slots));
    perform pg_notify('partitionq_slots', p_queue || '/' || p_grp);
    return v_gen.parent_slots;
end
$_$;

CREATE FUNCTION partitionq.resize_cutover(p_engine text, p_queue text, p_grp text) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'partitionq', 'pg_temp'
    AS $_$
declare
    v_gen  partitionq.generation;
    v_tick bigint;
    v_subs int[];
    v_sub  int;
begin
    select * into v_gen from partitionq.generation
     where queue = p_queue and grp = p_grp and parent_slots is not null and resize_txid is not null
       for update;
    if not found then
        return null;
    end if;
    if v_gen.cutover_tick is not null then
        return v_gen.cutover_tick;
    end if;
    v_tick := partitionq.engine_first_tick_seeing(p_engine, p_queue, v_gen.resize_after, v_gen.resize_txid);
    if v_tick is null then
        return null;
    end if;
    for i in 0 .. v_gen.slots - 1 loop
        if (partitionq.engine_sub(p_engine, p_queue, p_grp || '#' || i || '/' || v_gen.slots)).sub_id is not null then
            raise exception 'consumer %#%/% is registered already: a resize to % slots cannot register it at the cutover (unregister the stray consumer)',
                  p_grp, i, v_gen.slots, v_gen.slots using errcode = 'PQ006';
        end if;
        execute format('select %I.register_consumer_at($1, $2, $3)', p_engine) using p_queue, p_grp || '#' || i || '/' || v_gen.slots, v_tick;
    end loop;
    for i in 0 .. v_gen.parent_slots - 1 loop
        v_sub := (partitionq.engine_sub(p_engine, p_queue, p_grp || '#' || i || '/' || v_gen.parent_slots)).sub_id;
        if v_sub is not null then
            v_subs := v_subs || v_sub;
        end if;
    end loop;
    insert into partitionq.slot (queue, grp, n, slot) select p_queue, p_grp, v_gen.slots, s from generate_series(0, v_gen.slots - 1) s
        on conflict do nothing;
    update partitionq.generation set cutover_tick = v_tick, parent_subs = coalesce(v_subs, '{}')
     where queue = p_queue and grp = p_grp and slots = v_gen.slots;
    perform pg_notify('partitionq_slots', p_queue || '/' || p_grp);
    return v_tick;
end
$_$;

CREATE FUNCTION partitionq.resize_handoff(p_engine text, p_queue text, p_grp text, p_slot integer, p_epoch bigint) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'partitionq', 'pg_temp'
    AS $_$
declare
    v_gen  partitionq.generation;
    v_old  text;
    v_sub  record;
    v_slot text;
    v_left int;
begin
    select * into v_gen from partitionq.generation
     where queue = p_queue and grp = p_grp and parent_slots is not null for update;
    if not found or v_gen.cutover_tick is null then
        raise exception 'group % on queue % has no resize past its cutover: slot % has nothing to hand off', p_grp, p_queue, p_slot
              using errcode = 'PQ002';
    end if;
    perform 1 from partitionq.slot
     where queue = p_queue and grp = p_grp and n = v_gen.parent_slots and slot = p_slot and epoch = p_epoch and worker_id is not null
       for update;
    if not found then
        raise exception 'slot % of % of group % on queue % is not owned at epoch %', p_slot, v_gen.parent_slots, p_grp, p_queue, p_epoch
              using errcode = 'PQ001';
    end if;
    v_old := p_grp || '#' || p_slot || '/' || v_gen.parent_slots;
    v_sub := partitionq.engine_sub(p_engine, p_queue, v_old);
    if v_sub.sub_id is null or v_sub.last_tick is distinct from v_gen.cutover_tick or v_sub.batch_id is not null then
        raise exception 'slot % of % of group % on queue % is not drained to the cutover (tick %): its consumer is at tick %, open batch %',
              p_slot, v_gen.parent_slots, p_grp, p_queue, v_gen.cutover_tick, v_sub.last_tick, coalesce(v_sub.batch_id::text, 'none')
              using errcode = 'PQ002';
    end if;
    v_slot := '(case when r.ev_extra1 is null then 0 else (hashtextextended(r.ev_extra1, 0) % ' || v_gen.slots || ' + ' || v_gen.slots
              || ') % ' || v_gen.slots || ' end)';
    execute format('lock table %I.retry_queue in share update exclusive mode', p_engine);
    -- Rows a drain or an operator holds: wait for them (up to the caller's lock_timeout).
    execute format('select count(*) from (select 1 from %I.retry_queue r where r.ev_owner = $1 for update) x', p_engine) using v_sub.sub_id;
    execute format('update partitionq.failure f set consumer = $2 || ''#'' || %s || ''/'' || $3
                      from %I.retry_queue r where f.queue = $4 and f.consumer = $5 and r.ev_owner = $1 and r.ev_id = f.ev_id',
                   v_slot, p_engine)
       using v_sub.sub_id, p_grp, v_gen.slots, p_queue, v_old;
    delete from partitionq.failure where queue = p_queue and consumer = v_old;
    execute format('select count(%1$I.event_retry_raw($2, $3 || ''#'' || %2$s || ''/'' || $4, r.ev_retry_after, r.ev_id, r.ev_time, r.ev_retry,
                            r.ev_type, r.ev_data, r.ev_extra1, r.ev_extra2, r.ev_extra3, r.ev_extra4))
                      from (select * from %1$I.retry_queue r where r.ev_owner = $1 order by r.ev_id) r', p_engine, v_slot)
       using v_sub.sub_id, p_queue, p_grp, v_gen.slots;
    execute format('delete from %I.retry_queue where ev_owner = $1', p_engine) using v_sub.sub_id;
    execute format('select %I.unregister_consumer($1, $2)', p_engine) using p_queue, v_old;
    delete from partitionq.slot_progress where queue = p_queue and grp = p_grp and n = v_gen.parent_slots and slot = p_slot;
    delete from partitionq.slot_done where queue = p_queue and grp = p_grp and n = v_gen.parent_slots and slot = p_slot;
    delete from partitionq.slot_rate where queue = p_queue and grp = p_grp and n = v_gen.parent_slots and slot = p_slot;
    delete from partitionq.slot where queue = p_queue and grp = p_grp and n = v_gen.parent_slots and slot = p_slot;
    select count(*) into v_left from partitionq.slot where queue = p_queue and grp = p_grp and n = v_gen.parent_slots;
    if v_left = 0 then
        delete from partitionq.generation where queue = p_queue and grp = p_grp and slots = v_gen.parent_slots;
        update partitionq.generation set resize_txid = null
         where queue = p_queue and grp = p_grp and slots = v_gen.slots;
        insert into partitionq.audit (db_role, actor, action, queue, grp, reason, outcome)
        values (session_user, 'worker', 'resize', p_queue, p_grp, '',
                format('completed: %s to %s slots (generation %s)', v_gen.parent_slots, v_gen.slots, v_gen.number));
    end if;
    perform pg_notify('partitionq_slots', p_queue || '/' || p_grp);
    return v_left = 0;
end
$_$;

CREATE FUNCTION partitionq.set_aside(p_engine text, p_queue text, p_grp text, p_slot integer, p_consumer text, p_action text, p_ev_ids bigint[], p_reason text, p_actor text) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'partitionq', 'pg_temp'
    AS $$
declare
    v_n       int := partitionq.slot_count(p_grp, p_slot, p_consumer);
    v_count   int;
    v_missing bigint[];
    v_head    bigint;
    v_key     text;
    v_keys    int;
begin
    if p_action is null or p_action not in ('skip', 'quarantine') then
        raise exception 'set_aside records a skip or a quarantine, not %', p_action using errcode = '22023';
    end if;
    if p_queue is null or p_ev_ids is null or cardinality(p_ev_ids) = 0 then
        raise exception 'set_aside needs a queue and at least one event' using errcode = '22023';
    end if;
    with ev as materialized (
        select e.* from partitionq.engine_events(p_engine, p_queue, p_consumer, v_n, p_slot, p_ev_ids) e where e.parked),
    ins as (
        insert into partitionq.dead_letter (queue, grp, slot, slots, ev_id, ev_time, ev_type, ev_data, key, attempts,
                                            last_error, reason, actor, db_role)
        select p_queue, p_grp, p_slot, v_n, ev.ev_id, ev.ev_time, ev.ev_type, ev.ev_data, coalesce(ev.ev_key, ''),
               greatest(coalesce(f.attempts, 0), ev.ev_retry), coalesce(f.last_error, ''),
               p_action || case when coalesce(p_reason, '') = '' then '' else ': ' || p_reason end,
               coalesce(p_actor, ''), session_user
          from ev left join partitionq.failure f on f.queue = p_queue and f.consumer = p_consumer and f.ev_id = ev.ev_id
         order by ev.ev_id -- dead letters' ids in event order
            on conflict (queue, grp, ev_id) do nothing
        returning 1)
    select (select count(*) from ins),
           array(select u.id from unnest(p_ev_ids) u(id) where not exists (select 1 from ev where ev.ev_id = u.id)),
           (select min(ev.ev_id) from ev), (select min(coalesce(ev.ev_key, '')) from ev),
           (select count(distinct coalesce(ev.ev_key, '')) from ev)
      into v_count, v_missing, v_head, v_key, v_keys;
    if cardinality(v_missing) > 0 then
        raise exception 'event % of queue % is not parked for slot % of group %: only a blocked key''s parked events are skipped or quarantined',
              v_missing[1], p_queue, p_slot, p_grp using errcode = 'PQ002';
    end if;
    if v_keys > 1 then
        raise exception 'a % acts on one key: the events given are of % keys', p_action, v_keys using errcode = '22023';
    end if;
    insert into partitionq.audit (db_role, actor, action, queue, grp, key, ev_id, reason, outcome)
    values (session_user, coalesce(p_actor, ''), p_action, p_queue, p_grp, v_key, v_head, coalesce(p_reason, ''),
            case p_action when 'skip' then 'skipped' else 'quarantined' end);
    return v_count;
end
$$;

CREATE FUNCTION partitionq.slot_count(p_grp text, p_slot integer, p_consumer text) RETURNS integer
    LANGUAGE plpgsql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
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
$_$;

CREATE TRIGGER worker_version BEFORE INSERT OR UPDATE ON partitionq.worker FOR EACH ROW EXECUTE FUNCTION partitionq.refuse_old_worker();

REVOKE ALL ON FUNCTION partitionq.check_owner(p_queue text, p_grp text, p_n integer, p_slot integer, p_epoch bigint) FROM PUBLIC;

REVOKE ALL ON FUNCTION partitionq.engine_events(p_engine text, p_queue text, p_consumer text, p_n integer, p_slot integer, p_ids bigint[]) FROM PUBLIC;

REVOKE ALL ON FUNCTION partitionq.engine_first_tick_seeing(p_engine text, p_queue text, p_after bigint, p_txid bigint) FROM PUBLIC;

REVOKE ALL ON FUNCTION partitionq.engine_own_event(p_engine text, p_queue text, p_ev_id bigint) FROM PUBLIC;

REVOKE ALL ON FUNCTION partitionq.engine_sub(p_engine text, p_queue text, p_consumer text, OUT sub_id integer, OUT last_tick bigint, OUT batch_id bigint) FROM PUBLIC;

REVOKE ALL ON FUNCTION partitionq.ensure_generation(p_engine text, p_queue text, p_grp text) FROM PUBLIC;

REVOKE ALL ON FUNCTION partitionq.give_up(p_engine text, p_queue text, p_grp text, p_slot integer, p_consumer text, p_ev_ids bigint[], p_attempts integer[], p_errors text[], p_reasons text[]) FROM PUBLIC;

REVOKE ALL ON FUNCTION partitionq.purge_dead_letters(p_queue text, p_grp text, p_ids bigint[], p_before timestamp with time zone, p_reason text, p_actor text, p_note text, OUT purged bigint, OUT audit_id bigint) FROM PUBLIC;

REVOKE ALL ON FUNCTION partitionq.record_action(p_actor text, p_action text, p_queue text, p_grp text, p_key text, p_ev_id bigint, p_reason text, p_outcome text) FROM PUBLIC;

REVOKE ALL ON FUNCTION partitionq.record_done(p_queue text, p_grp text, p_n integer, p_slot integer, p_epoch bigint, p_batch bigint, p_ev_id bigint) FROM PUBLIC;

REVOKE ALL ON FUNCTION partitionq.record_replay(p_engine text, p_queue text, p_grp text, p_ids bigint[], p_ev_ids bigint[], p_reason text, p_actor text, p_note text, OUT replayed integer, OUT audit_id bigint) FROM PUBLIC;

REVOKE ALL ON FUNCTION partitionq.refuse_old_worker() FROM PUBLIC;

REVOKE ALL ON FUNCTION partitionq.resize(p_engine text, p_queue text, p_grp text, p_slots integer, p_actor text, p_reason text) FROM PUBLIC;

REVOKE ALL ON FUNCTION partitionq.resize_abort(p_engine text, p_queue text, p_grp text, p_actor text, p_reason text) FROM PUBLIC;

REVOKE ALL ON FUNCTION partitionq.resize_cutover(p_engine text, p_queue text, p_grp text) FROM PUBLIC;

REVOKE ALL ON FUNCTION partitionq.resize_handoff(p_engine text, p_queue text, p_grp text, p_slot integer, p_epoch bigint) FROM PUBLIC;

REVOKE ALL ON FUNCTION partitionq.set_aside(p_engine text, p_queue text, p_grp text, p_slot integer, p_consumer text, p_action text, p_ev_ids bigint[], p_reason text, p_actor text) FROM PUBLIC;

REVOKE ALL ON FUNCTION partitionq.slot_count(p_grp text, p_slot integer, p_consumer text) FROM PUBLIC;

INSERT INTO partitionq.schema_version VALUES (5);
INSERT INTO partitionq.ticker_turn VALUES ('tick', NULL, NULL);
INSERT INTO partitionq.ticker_turn VALUES ('retry', NULL, NULL);
INSERT INTO partitionq.ticker_turn VALUES ('maint', NULL, NULL);
