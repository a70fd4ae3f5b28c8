-- partitionq's schema at version 17, for the migration tests: what
-- sql/schema.sql showed when the version was made, on PostgreSQL 15,
-- written by
--   go test ./partitionq/internal/store -run TestLatestVersionIsFrozen -update
-- Frozen: do not edit.

CREATE SCHEMA partitionq;

-- ================================================================ tables
-- in the order the migrations create them

-- migration/0001_records.sql
CREATE TABLE partitionq.schema_version (
    version integer NOT NULL
);

-- migration/0001_records.sql, 0002_flagged.sql
CREATE TABLE partitionq.failure (
    queue           text                     NOT NULL,
    consumer        text                     NOT NULL,
    ev_id           bigint                   NOT NULL,
    attempts        integer                  NOT NULL,
    last_error      text                     DEFAULT ''::text NOT NULL,
    first_failed_at timestamp with time zone DEFAULT now() NOT NULL,
    last_failed_at  timestamp with time zone DEFAULT now() NOT NULL,
    next_attempt_at timestamp with time zone NOT NULL,
    flagged_at      timestamp with time zone,
    CONSTRAINT failure_pkey PRIMARY KEY (queue, consumer, ev_id)
);

-- migration/0001_records.sql, 0005_resize.sql
CREATE TABLE partitionq.dead_letter (
    id           bigserial,
    queue        text                     NOT NULL,
    grp          text                     NOT NULL,
    slot         integer                  NOT NULL,
    ev_id        bigint                   NOT NULL,
    ev_time      timestamp with time zone NOT NULL,
    ev_type      text                     NOT NULL,
    ev_data      text                     NOT NULL,
    key          text                     NOT NULL,
    attempts     integer                  NOT NULL,
    last_error   text                     DEFAULT ''::text NOT NULL,
    reason       text                     NOT NULL,
    actor        text                     DEFAULT ''::text NOT NULL,
    db_role      text                     DEFAULT SESSION_USER NOT NULL,
    dead_at      timestamp with time zone DEFAULT now() NOT NULL,
    replayed_at  timestamp with time zone,
    replay_ev_id bigint,
    slots        integer,
    CONSTRAINT dead_letter_pkey PRIMARY KEY (id)
);
CREATE UNIQUE INDEX dead_letter_event ON partitionq.dead_letter USING btree (queue, grp, ev_id);
CREATE INDEX dead_letter_group ON partitionq.dead_letter USING btree (queue, grp, id);

-- migration/0001_records.sql
CREATE TABLE partitionq.audit (
    id      bigserial,
    at      timestamp with time zone DEFAULT now() NOT NULL,
    db_role text                     DEFAULT SESSION_USER NOT NULL,
    actor   text                     DEFAULT ''::text NOT NULL,
    action  text                     NOT NULL,
    queue   text                     NOT NULL,
    grp     text                     NOT NULL,
    key     text,
    ev_id   bigint,
    reason  text                     DEFAULT ''::text NOT NULL,
    outcome text                     DEFAULT ''::text NOT NULL,
    CONSTRAINT audit_pkey PRIMARY KEY (id)
);
CREATE INDEX audit_group ON partitionq.audit USING btree (queue, grp, id);

-- migration/0003_ownership.sql, 0005_resize.sql, 0014_balance.sql
-- Slot ownership (docs/architecture.md, "Slot ownership"). A worker holds
-- a lease it renews about once a second; a slot is owned by the worker its
-- row names, at its epoch, while that worker's lease lasts. Every write that
-- ends work on a slot checks the epoch in its own transaction.
CREATE TABLE partitionq.worker (
    id             bigserial,
    identity       text                     NOT NULL,
    host           text                     DEFAULT ''::text NOT NULL,
    os_pid         integer                  DEFAULT 0 NOT NULL,
    db_role        text                     DEFAULT SESSION_USER NOT NULL,
    backend_pid    integer,
    backend_start  timestamp with time zone,
    started_at     timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    renewed_at     timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    lease_until    timestamp with time zone NOT NULL,
    schema_version integer,
    queue          text,
    grp            text,
    n              integer,
    generation     integer,
    member         text,
    balance        boolean                  DEFAULT false NOT NULL,
    pins           integer[],
    CONSTRAINT worker_pkey PRIMARY KEY (id)
);
CREATE INDEX worker_group ON partitionq.worker USING btree (queue, grp) WHERE (member IS NOT NULL);

-- migration/0003_ownership.sql, 0005_resize.sql, 0014_balance.sql, 0017_generation_keys.sql
CREATE TABLE partitionq.slot (
    queue      text                     NOT NULL,
    grp        text                     NOT NULL,
    slot       integer                  NOT NULL,
    n          integer                  NOT NULL,
    worker_id  bigint,
    epoch      bigint                   DEFAULT 0 NOT NULL,
    since      timestamp with time zone,
    handoff_to text,
    handoff_at timestamp with time zone,
    generation integer                  NOT NULL,
    CONSTRAINT slot_pkey PRIMARY KEY (queue, grp, generation, slot)
);
CREATE INDEX slot_worker ON partitionq.slot USING btree (worker_id);

-- migration/0003_ownership.sql, 0004_record_functions.sql, 0005_resize.sql, 0017_generation_keys.sql
-- Progress inside a slot's open batch (docs/guarantees.md, "What repeats
-- after a crash"): every event of the batch's share at or below done_below,
-- and those listed in done (delta-encoded ids above it), are resolved.
CREATE TABLE partitionq.slot_progress (
    queue       text                     NOT NULL,
    grp         text                     NOT NULL,
    slot        integer                  NOT NULL,
    batch_id    bigint,
    done_below  bigint                   DEFAULT 0 NOT NULL,
    done        bytea                    DEFAULT '\x'::bytea NOT NULL,
    handled     bigint                   DEFAULT 0 NOT NULL,
    failed      bigint                   DEFAULT 0 NOT NULL,
    updated_at  timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    finished_at timestamp with time zone,
    generation  integer                  NOT NULL,
    CONSTRAINT slot_progress_pkey PRIMARY KEY (queue, grp, generation, slot)
);

-- migration/0003_ownership.sql, 0005_resize.sql, 0017_generation_keys.sql
-- Events whose exactly-once handler committed in the open batch (TxHandler).
CREATE TABLE partitionq.slot_done (
    queue      text    NOT NULL,
    grp        text    NOT NULL,
    slot       integer NOT NULL,
    batch_id   bigint  NOT NULL,
    ev_id      bigint  NOT NULL,
    generation integer NOT NULL,
    CONSTRAINT slot_done_pkey PRIMARY KEY (queue, grp, generation, slot, ev_id)
);

-- migration/0003_ownership.sql
-- Whose turn a ticker round is: a row lock (tick, retry) or a lease (maint),
-- which only the roles granted update on this table can take.
CREATE TABLE partitionq.ticker_turn (
    name   text                     NOT NULL,
    holder text,
    until  timestamp with time zone,
    CONSTRAINT ticker_turn_pkey PRIMARY KEY (name)
);

-- migration/0004_record_functions.sql, 0005_resize.sql, 0017_generation_keys.sql
-- Handler outcomes per slot and second (unix seconds), added by every
-- progress flush and batch finish of the slot's owner: the rates Status
-- reports over the last 10 s and minute, whatever the number of workers.
-- Rows older than two minutes are deleted by the writes that add new ones,
-- so a slot has at most about 120 rows.
CREATE TABLE partitionq.slot_rate (
    queue      text    NOT NULL,
    grp        text    NOT NULL,
    slot       integer NOT NULL,
    sec        bigint  NOT NULL,
    handled    bigint  DEFAULT 0 NOT NULL,
    failed     bigint  DEFAULT 0 NOT NULL,
    generation integer NOT NULL,
    CONSTRAINT slot_rate_pkey PRIMARY KEY (queue, grp, generation, slot, sec)
);

-- migration/0005_resize.sql, 0017_generation_keys.sql
-- The generations of a group: one row, or two while a resize is in
-- flight (the old one, draining to the cutover, and the new one). A group
-- set up before version 5 has none until its next setup or resize: it is
-- its first generation, with the N of its engine consumers.
CREATE TABLE partitionq.generation (
    queue         text                     NOT NULL,
    grp           text                     NOT NULL,
    slots         integer                  NOT NULL,
    number        integer                  NOT NULL,
    parent_slots  integer,
    parent_subs   integer[]                DEFAULT '{}'::integer[] NOT NULL,
    resize_txid   bigint,
    resize_after  bigint,
    cutover_tick  bigint,
    created_at    timestamp with time zone DEFAULT now() NOT NULL,
    created_by    text                     DEFAULT SESSION_USER NOT NULL,
    actor         text                     DEFAULT ''::text NOT NULL,
    reason        text                     DEFAULT ''::text NOT NULL,
    parent_number integer,
    aborted       integer,
    CONSTRAINT generation_pkey PRIMARY KEY (queue, grp, slots),
    CONSTRAINT generation_slots_check CHECK (((slots >= 1) AND (slots <= 256)))
);

-- migration/0006_dedup.sql
-- Settings of a queue that partitionq keeps (the engine's are the engine's):
-- its dedup window. No row: the default (an hour). Written by setup (the owner).
CREATE TABLE partitionq.queue_config (
    queue        text     NOT NULL,
    dedup_window interval NOT NULL,
    CONSTRAINT queue_config_pkey PRIMARY KEY (queue)
);

-- migration/0006_dedup.sql
-- One row per (queue, dedup id) sent within its window. ev_id is the event
-- first sent with it; it is null only inside the sending transaction,
-- between the claim and the record (a row committed without one, which only
-- a hand-made call can leave, is claimed again by the next send). hits
-- counts the duplicates refused (in committed sends), last_hit_at the last.
-- A row past expires_at is removed by expire_dedup (or claimed again).
-- Half of each page is left free, so that the record of a claim (ev_id set,
-- no indexed column changed) is a heap-only update on the claim's page.
CREATE TABLE partitionq.dedup (
    queue       text                     NOT NULL,
    dedup_id    text                     NOT NULL,
    key         text                     NOT NULL,
    ev_id       bigint,
    sent_at     timestamp with time zone NOT NULL,
    expires_at  timestamp with time zone NOT NULL,
    hits        bigint                   DEFAULT 0 NOT NULL,
    last_hit_at timestamp with time zone,
    CONSTRAINT dedup_pkey PRIMARY KEY (queue, dedup_id)
) WITH (fillfactor=50);
CREATE INDEX dedup_expires_at ON partitionq.dedup USING btree (expires_at);
CREATE INDEX dedup_hits ON partitionq.dedup USING btree (queue, key, last_hit_at) WHERE (hits > 0);

-- migration/0007_operator.sql
-- How many events of each slot's share every tick range holds, counted
-- once per (queue, N) as ticks come, so that a slot's pending events cost
-- a few row reads whatever the backlog (docs/operations.md, "Exact pending
-- events and what they cost"). One row per tick from the position of the
-- slowest slot of any group of N slots on the queue: counts[s + 1] is the
-- number of events of slot s (keyed or not, ev_owner null) committed from
-- the census's base tick up to this tick (cumulative); firsts[s + 1] the
-- oldest ev_time among slot s's events of the range that ends at this tick
-- (null: none); owned the cumulative count of events re-inserted for one
-- consumer (ev_owner, by sub_id: the engine's timed retries), as a map.
CREATE TABLE partitionq.census (
    queue   text                       NOT NULL,
    n       integer                    NOT NULL,
    tick_id bigint                     NOT NULL,
    counts  bigint[]                   NOT NULL,
    firsts  timestamp with time zone[] NOT NULL,
    owned   jsonb                      DEFAULT '{}'::jsonb NOT NULL,
    CONSTRAINT census_pkey PRIMARY KEY (queue, n, tick_id)
);

-- migration/0007_operator.sql
-- Where the census of (queue, N) stands: its base tick and the newest tick
-- it has counted; the row is locked while a session counts.
CREATE TABLE partitionq.census_state (
    queue   text    NOT NULL,
    n       integer NOT NULL,
    base    bigint  NOT NULL,
    tick_id bigint  NOT NULL,
    CONSTRAINT census_state_pkey PRIMARY KEY (queue, n)
);

-- ================================================================== rows
-- what a new schema holds

INSERT INTO partitionq.schema_version (version) VALUES
    ('17');

INSERT INTO partitionq.ticker_turn (name, holder, until) VALUES
    ('maint', NULL, NULL),
    ('retry', NULL, NULL),
    ('tick', NULL, NULL);

-- ============================================================= functions
-- in name order, each from its file, with who may call it

-- function/census.sql
-- Counts the tick ranges of queue p_queue not counted yet for groups of
-- p_n slots, oldest first, until about p_budget events are counted (one
-- range at least; a range is counted whole), and drops the rows no slot
-- needs any more. Returns the events counted, or -1 when another session
-- is counting (it returns at once). Reads the event tables as the owner:
-- callers need no right on them, and get counts only.
--
-- The ranges of a call are chosen first (oldest first, until about
-- p_budget events by the ticks' event sequence), and one statement reads
-- them all, each range through the event tables' txid index. The slowest
-- consumer of a group is found by looking up each consumer's subscription
-- row by its key (a scan of the engine's subscription table reads the
-- dead versions of its many updates).
CREATE OR REPLACE FUNCTION partitionq.census(p_engine text, p_queue text, p_n integer, p_budget bigint)
 RETURNS bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'partitionq', 'pg_temp'
AS $function$
declare
    e        record := partitionq.engine_snap(p_engine);
    v_qid    int;
    v_pfx    text;
    v_min    bigint;
    v_state  record;
    v_prev   record;
    v_ticks  bigint[];
    v_snaps  text[];
    v_k      int := 0;
    v_i      int;
    v_j      int := 1;
    v_at     int[];
    v_slot   int[];
    v_owner  int8[];
    v_c      int8[];
    v_t      timestamptz[];
    v_done   bigint := 0;
    v_counts int8[];
    v_firsts timestamptz[];
    v_owned  jsonb;
begin
    if p_engine is null or p_engine not in ('pgq', 'pgque') then
        raise exception 'unknown engine schema %: pgq or pgque', p_engine using errcode = '22023';
    end if;
    if p_n is null or p_n < 1 or p_n > 100000 or p_budget is null or p_budget < 1 then
        raise exception 'census of % slots with a budget of %: give 1 slot or more and a positive budget', p_n, p_budget using errcode = '22023';
    end if;
    execute format('select queue_id, queue_data_pfx from %I.queue where queue_name = $1', p_engine) into v_qid, v_pfx using p_queue;
    if v_qid is not null then
        -- Each consumer's row looked up by its key: the engine updates these
        -- rows on every batch, and a scan of the table (what the planner
        -- chose once a vacuum had counted its rows) read every dead version.
        execute format('select min(s.sub_last_tick) from %1$I.consumer c
             cross join lateral (select s.sub_last_tick from %1$I.subscription s
                                  where s.sub_queue = $1 and s.sub_consumer = c.co_id offset 0) s
             where c.co_name ~ (''^.+#[0-9]+/'' || $2 || ''$'')', p_engine) into v_min using v_qid, p_n;
    end if;
    if v_min is null then -- no group of N slots on the queue (any more)
        delete from partitionq.census where queue = p_queue and n = p_n;
        delete from partitionq.census_state where queue = p_queue and n = p_n;
        return 0;
    end if;
    insert into partitionq.census_state (queue, n, base, tick_id) values (p_queue, p_n, v_min, v_min) on conflict do nothing;
    select * into v_state from partitionq.census_state where queue = p_queue and n = p_n for update skip locked;
    if not found then
        return -1;
    end if;
    if v_state.base > v_min or v_state.tick_id < v_min then
        -- A slot stands before the census's base (repositioned), or every
        -- slot has passed where it stands: count afresh from the slowest.
        delete from partitionq.census where queue = p_queue and n = p_n;
        update partitionq.census_state set base = v_min, tick_id = v_min where queue = p_queue and n = p_n;
        v_state.base := v_min;
        v_state.tick_id := v_min;
    end if;
    select counts, owned into v_counts, v_owned from partitionq.census where queue = p_queue and n = p_n and tick_id = v_state.tick_id;
    if v_counts is null then
        v_counts := array_fill(0::int8, array[p_n]);
        v_owned := '{}';
        insert into partitionq.census values (p_queue, p_n, v_state.tick_id, v_counts, array_fill(null::timestamptz, array[p_n]), v_owned);
    end if;
    execute format('select tick_id, tick_snapshot::text as snap, case when tick_id = 1 then 0 else tick_event_seq end as seq
          from %I.tick where tick_queue = $1 and tick_id = $2', p_engine) into v_prev using v_qid, v_state.tick_id;
    if v_prev.tick_id is null then
        return 0; -- its tick is gone: the next call counts afresh from the slowest slot
    end if;
    -- The ranges this call counts: the ticks after the census's newest,
    -- oldest first, while their events (by the queue's event sequence) stay
    -- within the budget, one at least.
    execute format($q$
        with t as (
            select tick_id, tick_snapshot::text as snap, tick_event_seq - $3 as upto
              from %I.tick where tick_queue = $1 and tick_id > $2)
        select array_agg(tick_id order by tick_id), array_agg(snap order by tick_id)
          from t where upto <= $4 or tick_id = (select min(tick_id) from t)$q$, p_engine)
        into v_ticks, v_snaps using v_qid, v_prev.tick_id, v_prev.seq, p_budget;
    v_k := coalesce(array_length(v_ticks, 1), 0);
    if v_k > 0 then
        -- Every event of the ranges, grouped by range, slot and owner: one
        -- statement, each range read through the event tables' txid index.
        execute format($q$
            with t as (select i::int as i, p::%4$s as prev, c::%4$s as cur from unnest($2::text[], $3::text[]) with ordinality u(p, c, i))
            select array_agg(i order by i), array_agg(slot order by i), array_agg(ev_owner order by i),
                   array_agg(c order by i), array_agg(t order by i)
              from (select t.i, x.slot, x.ev_owner, sum(x.c)::int8 as c, min(x.t) as t
                      from t cross join lateral (
                           select ev_txid, (case when ev_extra1 is null then 0 else (hashtextextended(ev_extra1, 0) %% $1 + $1) %% $1 end)::int as slot,
                                  ev_owner, count(*) as c, min(ev_time) as t
                             from %1$s where ev_txid >= %2$s(t.prev) and ev_txid < %3$s(t.cur) group by 1, 2, 3) x
                     where %5$s(x.ev_txid, t.cur) and not %5$s(x.ev_txid, t.prev)
                     group by 1, 2, 3) z$q$,
            v_pfx, e.xmin, e.xmax, e.snap, e.vis)
            into v_at, v_slot, v_owner, v_c, v_t using p_n, array[v_prev.snap] || v_snaps[1:v_k - 1], v_snaps;
    end if;
    for v_i in 1 .. v_k loop
        v_firsts := array_fill(null::timestamptz, array[p_n]);
        while v_j <= coalesce(array_length(v_at, 1), 0) and v_at[v_j] = v_i loop
            if v_owner[v_j] is null then
                v_counts[v_slot[v_j] + 1] := v_counts[v_slot[v_j] + 1] + v_c[v_j];
                v_firsts[v_slot[v_j] + 1] := least(v_firsts[v_slot[v_j] + 1], v_t[v_j]);
            else
                v_owned := jsonb_set(v_owned, array[v_owner[v_j]::text],
                                     to_jsonb(coalesce((v_owned ->> v_owner[v_j]::text)::int8, 0) + v_c[v_j]));
            end if;
            v_done := v_done + v_c[v_j];
            v_j := v_j + 1;
        end loop;
        insert into partitionq.census values (p_queue, p_n, v_ticks[v_i], v_counts, v_firsts, v_owned);
    end loop;
    if v_k > 0 then
        update partitionq.census_state set tick_id = v_ticks[v_k] where queue = p_queue and n = p_n;
    end if;
    delete from partitionq.census where queue = p_queue and n = p_n and tick_id < v_min;
    return v_done;
end
$function$;
REVOKE ALL ON FUNCTION partitionq.census(text,text,integer,bigint) FROM PUBLIC;

-- function/census_all.sql
-- The census of every (queue, N) of the database's groups, each until
-- about p_budget events: what the ticker runs after its ticks.
--
-- Only the queues whose newest tick is past the census of one of their N
-- (or that have none) are looked at: an idle queue costs nothing.
CREATE OR REPLACE FUNCTION partitionq.census_all(p_engine text, p_budget bigint)
 RETURNS bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'partitionq', 'pg_temp'
AS $function$
declare
    v_r    record;
    v_done bigint := 0;
begin
    if p_engine is null or p_engine not in ('pgq', 'pgque') then
        raise exception 'unknown engine schema %: pgq or pgque', p_engine using errcode = '22023';
    end if;
    for v_r in execute format($q$
        with due as (
            select q.queue_id, q.queue_name
              from %1$I.queue q
              cross join lateral (select max(t.tick_id) as newest from %1$I.tick t where t.tick_queue = q.queue_id) t
              left join lateral (select min(cs.tick_id) as at from partitionq.census_state cs where cs.queue = q.queue_name) c on true
             where c.at is null or c.at < t.newest)
        select distinct due.queue_name as queue, substring(c.co_name from '#[0-9]+/([0-9]+)$')::int as n
          from due join %1$I.subscription s on s.sub_queue = due.queue_id join %1$I.consumer c on c.co_id = s.sub_consumer
         where c.co_name ~ '^.+#[0-9]+/[0-9]{1,6}$'
        union
        select cs.queue, cs.n from partitionq.census_state cs
         where cs.queue in (select queue_name from due)
            or not exists (select 1 from %1$I.queue q where q.queue_name = cs.queue)$q$, p_engine) loop
        v_done := v_done + greatest(partitionq.census(p_engine, v_r.queue, v_r.n, p_budget), 0);
    end loop;
    return v_done;
end
$function$;
REVOKE ALL ON FUNCTION partitionq.census_all(text,bigint) FROM PUBLIC;

-- function/check_owner.sql
-- The fencing token, for handlers' own transactions: is slot p_slot of the
-- group's generation of p_n slots still owned at epoch p_epoch? A group's
-- epochs are unique across its generations (a generation's start at its
-- number times 2^32), so the epoch names the generation too: after a
-- resize back to an N the group had before, an epoch of the earlier
-- generation matches no row. The row stays locked for share until the
-- caller's transaction ends, so a takeover waits for it.
CREATE OR REPLACE FUNCTION partitionq.check_owner(p_queue text, p_grp text, p_n integer, p_slot integer, p_epoch bigint)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
    return partitionq.owner_generation(p_queue, p_grp, p_n, p_slot, p_epoch) is not null;
end
$function$;
REVOKE ALL ON FUNCTION partitionq.check_owner(text,text,integer,integer,bigint) FROM PUBLIC;

-- function/dedup_claim.sql
-- A send claims dedup ids p_ids (distinct; p_keys[i] the key of the message
-- that carries p_ids[i], p_counts[i] how many messages of the send carry it,
-- p_windows_us[i] its window in microseconds, null for the queue's). Per
-- id it returns claimed true when the send now owns it (a new id, one whose
-- record expired, or one left without an event): the send then inserts the
-- event and records it with dedup_record in the same transaction. Otherwise
-- the record is live: ev_id and key are the first send's, and the record
-- counts the hits. A concurrent send of the same id waits for this one's
-- transaction (the primary key), then sees its outcome: its event if it
-- committed, a free id if it rolled back. Under REPEATABLE READ or
-- SERIALIZABLE a record committed after the caller's snapshot is a
-- serialization failure (40001): retry the transaction.
--
-- Without p_upsert the rows are inserted plainly, a third of the work of
-- an INSERT ... ON CONFLICT (its speculative insertion): for a large batch
-- of new ids, the usual case. An id that has a record (or that a
-- concurrent send commits meanwhile) makes that insert fail with
-- unique_violation (23505), and the caller claims again with p_upsert,
-- the ON CONFLICT path.
CREATE OR REPLACE FUNCTION partitionq.dedup_claim(p_queue text, p_ids text[], p_keys text[], p_counts integer[], p_windows_us bigint[], p_upsert boolean DEFAULT false)
 RETURNS TABLE(dedup_id text, claimed boolean, ev_id bigint, key text)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'partitionq', 'pg_temp'
AS $function$
#variable_conflict use_column
declare
    v_n      int := coalesce(cardinality(p_ids), 0);
    v_now    timestamptz := statement_timestamp();
    v_window interval;
begin
    if p_queue is null or coalesce(cardinality(p_keys), 0) <> v_n or coalesce(cardinality(p_counts), 0) <> v_n
       or coalesce(cardinality(p_windows_us), 0) <> v_n then
        raise exception 'dedup_claim needs a queue and, per dedup id, a key, a count and a window' using errcode = '22023';
    end if;
    if exists (select 1 from unnest(p_ids, p_keys, p_counts, p_windows_us) u(id, k, c, w)
                where u.id is null or u.id = '' or octet_length(u.id) > 512 or u.k is null or u.c is null or u.c < 1
                   or u.w < 1000 or u.w > 7 * 86400 * 1000000::bigint) then
        raise exception 'dedup_claim: a dedup id is 1 to 512 bytes, with a key, a count of 1 or more, and a window from 1 millisecond to 7 days'
              using errcode = '22023';
    end if;
    if (select count(distinct u.id) from unnest(p_ids) u(id)) <> v_n then
        raise exception 'dedup_claim: the dedup ids must be distinct' using errcode = '22023';
    end if;
    select c.dedup_window into v_window from partitionq.queue_config c where c.queue = p_queue;
    v_window := coalesce(v_window, interval '1 hour');
    if not coalesce(p_upsert, true) then
        insert into partitionq.dedup (queue, dedup_id, key, sent_at, expires_at, hits, last_hit_at)
        select p_queue, u.id, u.k, v_now, v_now + coalesce(u.w * interval '1 microsecond', v_window), u.c - 1,
               case when u.c > 1 then v_now end
          from unnest(p_ids, p_keys, p_counts, p_windows_us) with ordinality u(id, k, c, w, n)
         order by u.n;
        return query select u.id, true, null::bigint, u.k from unnest(p_ids, p_keys) u(id, k);
        return;
    end if;
    return query
    with ins as (
        insert into partitionq.dedup as d (queue, dedup_id, key, sent_at, expires_at, hits, last_hit_at)
        select p_queue, u.id, u.k, v_now, v_now + coalesce(u.w * interval '1 microsecond', v_window), u.c - 1,
               case when u.c > 1 then v_now end
          from unnest(p_ids, p_keys, p_counts, p_windows_us) with ordinality u(id, k, c, w, n)
         order by u.n
            on conflict on constraint dedup_pkey do update set
               ev_id       = case when d.ev_id is not null and d.expires_at > v_now then d.ev_id end,
               key         = case when d.ev_id is not null and d.expires_at > v_now then d.key else excluded.key end,
               sent_at     = case when d.ev_id is not null and d.expires_at > v_now then d.sent_at else excluded.sent_at end,
               expires_at  = case when d.ev_id is not null and d.expires_at > v_now then d.expires_at else excluded.expires_at end,
               hits        = case when d.ev_id is not null and d.expires_at > v_now then d.hits + excluded.hits + 1 else excluded.hits end,
               last_hit_at = case when d.ev_id is not null and d.expires_at > v_now then v_now else excluded.last_hit_at end
        returning d.dedup_id, d.ev_id is null, d.ev_id, d.key)
    select * from ins;
end
$function$;
REVOKE ALL ON FUNCTION partitionq.dedup_claim(text,text[],text[],integer[],bigint[],boolean) FROM PUBLIC;

-- function/dedup_record.sql
-- A send records the events it inserted for the dedup ids it claimed:
-- p_ev_ids[i] for p_ids[i]. Each id must be claimed and not yet recorded,
-- and each event inserted into queue p_queue by the current transaction
-- with the claim's key (PQ002 otherwise); returns the count. The records
-- are found through the primary key alone (dedup_id = any), whatever the
-- table's statistics say of ev_id; the pairs are looked up in jsonb maps.
CREATE OR REPLACE FUNCTION partitionq.dedup_record(p_engine text, p_queue text, p_ids text[], p_ev_ids bigint[])
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'partitionq', 'pg_temp'
AS $function$
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
$function$;
REVOKE ALL ON FUNCTION partitionq.dedup_record(text,text,text[],bigint[]) FROM PUBLIC;

-- function/engine_events.sql
-- The events among p_ids of the slot p_slot (of p_n) that consumer
-- p_consumer of queue p_queue may give up: its own rows of the retry queue
-- (parked, or a timed retry), and the events of its open batch (the
-- engine's own description of the batch, batch_event_sql, which keeps the
-- retried events of this consumer only). An event of
-- another slot, of no open batch, or already resolved is not returned.
--
-- A read of the engine's state for give_up and set_aside: not SECURITY
-- DEFINER, granted to nobody. The engine's schema is an argument checked
-- against the two known names.
CREATE OR REPLACE FUNCTION partitionq.engine_events(p_engine text, p_queue text, p_consumer text, p_n integer, p_slot integer, p_ids bigint[])
 RETURNS TABLE(ev_id bigint, ev_time timestamp with time zone, ev_retry integer, ev_type text, ev_data text, ev_key text, parked boolean)
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
$function$;
REVOKE ALL ON FUNCTION partitionq.engine_events(text,text,text,integer,integer,bigint[]) FROM PUBLIC;

-- function/engine_first_tick_seeing.sql
-- The first tick of the queue after p_after whose snapshot sees the
-- transaction p_txid committed (null while there is none).
--
-- An engine-facing step of a resize, run as the schema's owner by the
-- resize functions (not SECURITY DEFINER itself, granted to nobody); the
-- engine's schema is an argument checked against the two known names.
CREATE OR REPLACE FUNCTION partitionq.engine_first_tick_seeing(p_engine text, p_queue text, p_after bigint, p_txid bigint)
 RETURNS bigint
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
$function$;
REVOKE ALL ON FUNCTION partitionq.engine_first_tick_seeing(text,text,bigint,bigint) FROM PUBLIC;

-- function/engine_own_event.sql
-- The event p_ev_id of queue p_queue if the current transaction inserted
-- it (a replay is sent and recorded in one transaction). A read of the
-- engine's state for record_replay: not SECURITY DEFINER, granted to nobody.
CREATE OR REPLACE FUNCTION partitionq.engine_own_event(p_engine text, p_queue text, p_ev_id bigint)
 RETURNS TABLE(ev_type text, ev_data text, ev_key text)
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
$function$;
REVOKE ALL ON FUNCTION partitionq.engine_own_event(text,text,bigint) FROM PUBLIC;

-- function/engine_own_events.sql
-- The events among p_ev_ids of queue p_queue that the current transaction
-- inserted, with their keys: engine_own_event for many (not SECURITY
-- DEFINER, granted to nobody: dedup_record calls it). It reads the
-- transaction's events through the event tables' ev_txid index.
CREATE OR REPLACE FUNCTION partitionq.engine_own_events(p_engine text, p_queue text, p_ev_ids bigint[])
 RETURNS TABLE(ev_id bigint, ev_key text)
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
    -- ev_txid is the inserting transaction's (PgQ: bigint, PgQue: xid8),
    -- the top-level one also for inserts made in a savepoint.
    return query execute format('select e.ev_id, e.ev_extra1 from %s e where e.ev_txid = %s and e.ev_id = any($1)', v_pfx,
         case p_engine when 'pgq' then 'txid_current()' else 'pg_current_xact_id()' end)
        using p_ev_ids;
end
$function$;
REVOKE ALL ON FUNCTION partitionq.engine_own_events(text,text,bigint[]) FROM PUBLIC;

-- function/engine_snap.sql
-- The engine's names of one engine's snapshot functions and types.
CREATE OR REPLACE FUNCTION partitionq.engine_snap(p_engine text, OUT vis text, OUT xmin text, OUT xmax text, OUT snap text, OUT xid text)
 RETURNS record
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    select case p_engine when 'pgq' then 'txid_visible_in_snapshot' else 'pg_visible_in_snapshot' end,
           case p_engine when 'pgq' then 'txid_snapshot_xmin' else 'pg_snapshot_xmin' end,
           case p_engine when 'pgq' then 'txid_snapshot_xmax' else 'pg_snapshot_xmax' end,
           case p_engine when 'pgq' then 'txid_snapshot' else 'pg_snapshot' end,
           case p_engine when 'pgq' then 'bigint' else 'xid8' end
$function$;
REVOKE ALL ON FUNCTION partitionq.engine_snap(text) FROM PUBLIC;

-- function/engine_sub.sql
-- The subscription of a consumer (null when it is not registered), its
-- position and its open batch.
--
-- An engine-facing step of a resize, run as the schema's owner by the
-- resize functions (not SECURITY DEFINER itself, granted to nobody); the
-- engine's schema is an argument checked against the two known names.
CREATE OR REPLACE FUNCTION partitionq.engine_sub(p_engine text, p_queue text, p_consumer text, OUT sub_id integer, OUT last_tick bigint, OUT batch_id bigint)
 RETURNS record
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
    if p_engine is null or p_engine not in ('pgq', 'pgque') then
        raise exception 'unknown engine schema %: pgq or pgque', p_engine using errcode = '22023';
    end if;
    execute format('select s.sub_id, s.sub_last_tick, s.sub_batch from %1$I.subscription s join %1$I.queue q on q.queue_id = s.sub_queue
                     join %1$I.consumer c on c.co_id = s.sub_consumer where q.queue_name = $1 and c.co_name = $2', p_engine)
       into sub_id, last_tick, batch_id using p_queue, p_consumer;
end
$function$;
REVOKE ALL ON FUNCTION partitionq.engine_sub(text,text,text) FROM PUBLIC;

-- function/ensure_generation.sql
-- A group's first generation, from its engine consumers "<grp>#<s>/<N>",
-- when it has no generation row yet (a group set up before version 5).
-- Setup (the owner) calls it, and resize (as the owner); granted to nobody.
CREATE OR REPLACE FUNCTION partitionq.ensure_generation(p_engine text, p_queue text, p_grp text)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
    insert into partitionq.slot (queue, grp, generation, n, slot) select p_queue, p_grp, 1, v_n, s from generate_series(0, v_n - 1) s
        on conflict do nothing;
end
$function$;
REVOKE ALL ON FUNCTION partitionq.ensure_generation(text,text,text) FROM PUBLIC;

-- function/event_fate.sql
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
CREATE OR REPLACE FUNCTION partitionq.event_fate(p_engine text, p_queue text, p_consumer text, p_key text, p_ev_id bigint)
 RETURNS text
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'partitionq', 'pg_temp'
AS $function$
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
$function$;
REVOKE ALL ON FUNCTION partitionq.event_fate(text,text,text,text,bigint) FROM PUBLIC;

-- function/expire_dedup.sql
-- Deletes up to p_limit expired dedup records, oldest first, skipping rows
-- a send holds; returns how many. Bounded work: call it again while it
-- returns p_limit. partitionq's ticker does (docs/operations.md); under
-- pgqd, run it from cron.
CREATE OR REPLACE FUNCTION partitionq.expire_dedup(p_limit integer DEFAULT 5000)
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'partitionq', 'pg_temp'
AS $function$
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
$function$;
REVOKE ALL ON FUNCTION partitionq.expire_dedup(integer) FROM PUBLIC;

-- function/fence.sql
-- A handler's fence (docs/handlers.md, "Fencing your writes"): checks, in
-- the handler's own transaction, that the worker that handed it the event
-- still owns the event's slot at the event's epoch, and raises PQ001 when
-- it does not. The fence is "<queue>/<group>/<slots>/<slot>/<epoch>"
-- (queue and group names hold no "/"). Like check_owner, it holds the
-- slot's row (for share) until the caller's transaction ends, so that no
-- other worker takes the slot between the check and the commit.
CREATE OR REPLACE FUNCTION partitionq.fence(p_fence text)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
$function$;
REVOKE ALL ON FUNCTION partitionq.fence(text) FROM PUBLIC;

-- function/give_up.sql
-- A worker gives events of its slot up: each must be in the slot's open
-- batch or in its retry queue (PQ002 otherwise). Content from the engine;
-- the dead letter records the slot's generation (its N). Fenced like every
-- write that ends work on a slot: refused (PQ001) unless the slot is owned
-- at p_epoch (check_owner holds the slot's row until the transaction ends,
-- so that no takeover commits in between): a zombie worker, or a worker
-- role calling it by hand, cannot dead-letter another owner's events.
CREATE OR REPLACE FUNCTION partitionq.give_up(p_engine text, p_queue text, p_grp text, p_slot integer, p_epoch bigint, p_consumer text, p_ev_ids bigint[], p_attempts integer[], p_errors text[], p_reasons text[])
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'partitionq', 'pg_temp'
AS $function$
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
    if not partitionq.check_owner(p_queue, p_grp, v_n, p_slot, p_epoch) then
        raise exception 'slot % of % of group % on queue % is not owned at epoch %: only its owner gives its events up', p_slot, v_n, p_grp, p_queue, p_epoch
              using errcode = 'PQ001';
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
$function$;
REVOKE ALL ON FUNCTION partitionq.give_up(text,text,text,integer,bigint,text,bigint[],integer[],text[],text[]) FROM PUBLIC;

-- function/group_backlog.sql
-- Every slot's pending events of group p_group of queue p_queue: the
-- events of its share after the last tick it finished (keyless or its own
-- retried ones), less what the recorded progress of its open batch marks
-- resolved (p_batch, p_below per slot; p_done_slots, p_done_ids the ids
-- above the watermark), and the age of the oldest of them. Three parts:
-- the tick ranges the census has counted (two row reads per slot), the
-- events after the census's newest tick (one scan of the event tables,
-- through their txid index, of at most p_budget events), and each open
-- batch with recorded progress (one scan of those batches' range). When
-- the scan after the census stops at its budget (the census is far behind:
-- no tick for long, or it has just started), pending is what was counted
-- and pending_max adds the events sent after that point (from the queue's
-- event sequence), so the true count lies between them; else both are the
-- exact count. Counts only: the caller needs no right on the event tables.
CREATE OR REPLACE FUNCTION partitionq.group_backlog(p_engine text, p_queue text, p_group text, p_n integer, p_batch bigint[], p_below bigint[], p_done_slots integer[], p_done_ids bigint[], p_budget bigint)
 RETURNS TABLE(slot integer, pending bigint, pending_max bigint, oldest interval)
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'partitionq', 'pg_temp'
AS $function$
declare
    e        record := partitionq.engine_snap(p_engine);
    v_qid    int;
    v_pfx    text;
    v_head   bigint;
    v_n      int := p_n;
    v_i      int;
    v_found  int := 0;
    v_state  record;
    v_hcounts int8[];
    v_howned  jsonb;
    v_fcounts int8[];
    v_fowned  jsonb;
    v_r      record;
    v_subs   int4[];
    v_tsnap  text[];
    v_tseq   int8[];
    v_lsnap  text[];
    v_bsnap  text[];
    v_below  int8[];
    v_open   boolean[];
    v_count  int8[];
    v_oldest timestamptz[];
    v_minseq int8;
    v_extra  int8 := 0;
    v_scan   int8;
    v_slot   text;
    v_ft     bigint;
    v_fsnap  text;
    v_fseq   int8;
    v_ts     text;
    v_tq     int8;
    v_first  timestamptz;
begin
    if p_engine is null or p_engine not in ('pgq', 'pgque') then
        raise exception 'unknown engine schema %: pgq or pgque', p_engine using errcode = '22023';
    end if;
    execute format('select queue_id, queue_data_pfx, coalesce(pg_sequence_last_value(queue_event_seq::regclass), 0)
          from %I.queue where queue_name = $1', p_engine) into v_qid, v_pfx, v_head using p_queue;
    if v_qid is null then
        return;
    end if;
    if p_n is null or p_n < 1 then
        raise exception 'the backlog of a generation of % slots: give 1 or more', p_n using errcode = '22023';
    end if;
    -- The generation's slots (of N = p_n), in slot order; during a resize
    -- some have no consumer (not registered yet, or handed off): none counted.
    for i in 1 .. v_n loop
        v_subs[i] := 0;
        v_open[i] := false;
        v_count[i] := 0;
    end loop;
    for v_r in execute format($q$select substring(c.co_name from '#([0-9]+)/')::int as slot,
                 substring(c.co_name from '/([0-9]+)$')::int as n, s.sub_id, s.sub_last_tick, s.sub_batch, s.sub_next_tick,
                 lt.tick_snapshot::text as lsnap, case when lt.tick_id = 1 then 0 else lt.tick_event_seq end as lseq,
                 nt.tick_snapshot::text as bsnap, nt.tick_event_seq as bseq
            from %1$I.subscription s join %1$I.consumer c on c.co_id = s.sub_consumer
            join %1$I.tick lt on lt.tick_queue = s.sub_queue and lt.tick_id = s.sub_last_tick
            left join %1$I.tick nt on nt.tick_queue = s.sub_queue and nt.tick_id = s.sub_next_tick
           where s.sub_queue = $1 and starts_with(c.co_name, $2 || '#') and c.co_name ~ ('#[0-9]+/' || $3 || '$')
           order by 1$q$, p_engine) using v_qid, p_group, p_n loop
        if v_r.slot >= v_n then
            raise exception 'consumer of slot % of group % of queue % has no place among % slots', v_r.slot, p_group, p_queue, v_n
                  using errcode = '22023';
        end if;
        v_i := v_r.slot + 1;
        v_found := v_found + 1;
        v_subs[v_i] := v_r.sub_id;
        v_lsnap[v_i] := v_r.lsnap;
        v_open[v_i] := v_r.sub_batch is not null and v_r.bsnap is not null and coalesce(p_batch[v_i], 0) = v_r.sub_batch;
        v_below[v_i] := case when v_open[v_i] then coalesce(p_below[v_i], 0) else 0 end;
        v_bsnap[v_i] := case when v_open[v_i] then v_r.bsnap end;
        -- From where the slot's events are counted: its last finished tick,
        -- or the end of its open batch when the batch's own events are
        -- counted one by one (its progress is recorded).
        v_ft := case when v_open[v_i] then v_r.sub_next_tick else v_r.sub_last_tick end;
        v_fsnap := case when v_open[v_i] then v_r.bsnap else v_r.lsnap end;
        v_fseq := case when v_open[v_i] then v_r.bseq else v_r.lseq end;
        v_count[v_i] := 0;
        v_oldest[v_i] := null;
        select * into v_state from partitionq.census_state cs where cs.queue = p_queue and cs.n = v_r.n;
        if v_state.tick_id is not null and v_ft >= v_state.base and v_ft <= v_state.tick_id then
            if v_hcounts is null then
                select c.counts, c.owned into v_hcounts, v_howned from partitionq.census c
                 where c.queue = p_queue and c.n = v_r.n and c.tick_id = v_state.tick_id;
            end if;
            v_fcounts := null;
            select c.counts, c.owned into v_fcounts, v_fowned from partitionq.census c
             where c.queue = p_queue and c.n = v_r.n and c.tick_id = v_ft;
            if v_hcounts is not null and v_fcounts is not null then
                v_count[v_i] := v_hcounts[v_i] - v_fcounts[v_i]
                    + coalesce((v_howned ->> v_r.sub_id::text)::int8, 0) - coalesce((v_fowned ->> v_r.sub_id::text)::int8, 0);
                if v_hcounts[v_i] > v_fcounts[v_i] then
                    select c.firsts[v_i] into v_first from partitionq.census c
                     where c.queue = p_queue and c.n = v_r.n and c.tick_id > v_ft and c.tick_id <= v_state.tick_id
                       and c.counts[v_i] > v_fcounts[v_i] order by c.tick_id limit 1;
                    v_oldest[v_i] := v_first;
                end if;
                -- The rest: after the census's newest tick.
                execute format('select tick_snapshot::text, case when tick_id = 1 then 0 else tick_event_seq end from %I.tick
                     where tick_queue = $1 and tick_id = $2', p_engine) into v_ts, v_tq using v_qid, v_state.tick_id;
                v_tsnap[v_i] := v_ts;
                v_tseq[v_i] := v_tq;
            end if;
        end if;
        if v_tsnap[v_i] is null then -- no census of it: everything after its position is counted by the scan
            v_tsnap[v_i] := v_fsnap;
            v_tseq[v_i] := v_fseq;
        end if;
    end loop;
    if v_found = 0 then
        return;
    end if;
    v_slot := '(case when e.ev_extra1 is null then 0 else (hashtextextended(e.ev_extra1, 0) % ' || v_n || ' + ' || v_n || ') % ' || v_n || ' end)';

    -- After the census (or the slot's position): one scan, at most p_budget events.
    v_scan := 0;
    for v_r in execute format($q$
        with s as materialized (
            select (o - 1)::int as slot, sub, snap::%3$s as snap from unnest($1::int4[], $2::text[]) with ordinality u(sub, snap, o)),
        x as materialized (
            select e.ev_txid, %4$s::int as slot, e.ev_owner, e.ev_time from %1$s e
             where e.ev_txid >= (select min(%2$s(snap)) from s) order by e.ev_txid limit $3),
        agg as (select x.slot, x.ev_txid, x.ev_owner, count(*) as n, min(x.ev_time) as t from x group by 1, 2, 3)
        select s.slot, sum(agg.n)::int8 as n, min(agg.t) as t from agg join s on s.slot = agg.slot
         where (agg.ev_owner is null or agg.ev_owner = s.sub) and not %5$s(agg.ev_txid, s.snap) group by s.slot
        union all select -1, (select count(*) from x), null$q$,
        v_pfx, e.xmin, e.snap, v_slot, e.vis) using v_subs, v_tsnap, p_budget loop
        if v_r.slot < 0 then
            v_scan := v_r.n;
        else
            v_count[v_r.slot + 1] := v_count[v_r.slot + 1] + v_r.n;
            v_oldest[v_r.slot + 1] := least(v_oldest[v_r.slot + 1], v_r.t);
        end if;
    end loop;
    if v_scan >= p_budget then
        -- Stopped at the budget: the events sent after the scan's start and
        -- not counted bound what is missing.
        select min(x) into v_minseq from unnest(v_tseq) x;
        v_extra := greatest(v_head - v_minseq - v_scan, 0) + 1;
    end if;

    -- The open batches whose progress is recorded, event by event.
    if true = any(v_open) then
        for v_r in execute format($q$
            with s as materialized (
                select (o - 1)::int as slot, sub, l::%3$s as l, b::%3$s as b, below
                  from unnest($1::int4[], $2::text[], $3::text[], $4::int8[], $5::boolean[]) with ordinality u(sub, l, b, below, open, o)
                 where open),
            done as materialized (select * from unnest($6::int4[], $7::int8[]) d(slot, id))
            select s.slot, count(*)::int8 as n, min(e.ev_time) as t
              from %1$s e join s on s.slot = %5$s
             where e.ev_txid >= (select min(%2$s(l)) from s) and e.ev_txid < (select max(%4$s(b)) from s)
               and (e.ev_owner is null or e.ev_owner = s.sub)
               and %6$s(e.ev_txid, s.b) and not %6$s(e.ev_txid, s.l)
               and e.ev_id > s.below and (s.slot, e.ev_id) not in (select d.slot, d.id from done d)
             group by s.slot$q$,
            v_pfx, e.xmin, e.snap, e.xmax, v_slot, e.vis) using v_subs, v_lsnap, v_bsnap, v_below, v_open,
                coalesce(p_done_slots, '{}'), coalesce(p_done_ids, '{}') loop
            v_count[v_r.slot + 1] := v_count[v_r.slot + 1] + v_r.n;
            v_oldest[v_r.slot + 1] := least(v_oldest[v_r.slot + 1], v_r.t);
        end loop;
    end if;

    for i in 1 .. v_n loop
        continue when v_subs[i] = 0;
        slot := i - 1;
        pending := v_count[i];
        pending_max := v_count[i] + v_extra;
        oldest := case when v_count[i] > 0 then greatest(now() - v_oldest[i], '0') end;
        return next;
    end loop;
end
$function$;
REVOKE ALL ON FUNCTION partitionq.group_backlog(text,text,text,integer,bigint[],bigint[],integer[],bigint[],bigint) FROM PUBLIC;

-- function/group_keys.sql
-- The keys of group p_group with the most pending events (the events of
-- each slot's share after the last tick it finished, keyless ones under
-- the key ''), and for each slot the key of its oldest pending event.
-- Rows of kind:
--   'key'    slot, key, pending, err: the p_top keys with the most pending
--            events, and the busiest key of each slot; err is 0 when
--            counted exactly, else the half-width of a 95% interval of the
--            sampled estimate (pages sampled as clusters: the variance of a
--            ratio estimate between pages)
--   'oldest' slot, key, oldest: the key of the slot's oldest pending event
--            among the first p_window events after its position (by
--            commit order; none when it has no pending event there)
--   'meta'   pending: the events counted or sampled; err: 1 when sampled
-- When the group's pending events (p_total, the caller's Status) are at
-- most p_exact_max, every one is read and counted; else the event tables
-- are sampled by page (TABLESAMPLE SYSTEM), about p_sample events, and
-- each key's count estimated from its share of the sampled pending events
-- times p_total. Counts and keys only: no payload.
CREATE OR REPLACE FUNCTION partitionq.group_keys(p_engine text, p_queue text, p_group text, p_n integer, p_top integer, p_total bigint, p_exact_max bigint, p_sample bigint, p_window bigint)
 RETURNS TABLE(kind text, slot integer, key text, pending bigint, err bigint, oldest interval)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'partitionq', 'pg_temp'
AS $function$
declare
    e       record := partitionq.engine_snap(p_engine);
    v_qid   int;
    v_pfx   text;
    v_n     int := p_n;
    v_found int := 0;
    v_subs  int4[];
    v_snaps text[];
    v_r     record;
    v_slot  text;
    v_from  text;
    v_rows  float8;
    v_pct   float8;
    v_exact boolean := p_total <= p_exact_max;
begin
    if p_engine is null or p_engine not in ('pgq', 'pgque') then
        raise exception 'unknown engine schema %: pgq or pgque', p_engine using errcode = '22023';
    end if;
    if p_top is null or p_top < 1 or p_top > 10000 then
        raise exception 'top % keys: give 1 to 10000', p_top using errcode = '22023';
    end if;
    execute format('select queue_id, queue_data_pfx from %I.queue where queue_name = $1', p_engine) into v_qid, v_pfx using p_queue;
    if v_qid is null then
        return;
    end if;
    for v_r in execute format($q$select substring(c.co_name from '#([0-9]+)/')::int as slot, s.sub_id, t.tick_snapshot::text as snap
            from %1$I.subscription s join %1$I.consumer c on c.co_id = s.sub_consumer
            join %1$I.tick t on t.tick_queue = s.sub_queue and t.tick_id = s.sub_last_tick
           where s.sub_queue = $1 and starts_with(c.co_name, $2 || '#') and c.co_name ~ ('#[0-9]+/' || $3 || '$')
           order by 1$q$, p_engine) using v_qid, p_group, p_n loop
        continue when v_r.slot >= v_n;
        v_found := v_found + 1;
        v_subs[v_r.slot + 1] := v_r.sub_id;
        v_snaps[v_r.slot + 1] := v_r.snap;
    end loop;
    if v_found = 0 then
        return;
    end if;
    for i in 1 .. v_n loop -- slots without a consumer (a resize in flight) count nothing
        v_subs[i] := coalesce(v_subs[i], 0);
    end loop;
    v_slot := '(case when e.ev_extra1 is null then 0 else (hashtextextended(e.ev_extra1, 0) % ' || v_n || ' + ' || v_n || ') % ' || v_n || ' end)';
    v_from := v_pfx || ' e';
    if not v_exact then
        -- Pages to sample: about p_sample events of the queue's tables.
        select coalesce(sum(greatest(c.reltuples, 0)), 0) into v_rows from pg_catalog.pg_inherits i
          join pg_catalog.pg_class c on c.oid = i.inhrelid where i.inhparent = v_pfx::regclass;
        v_pct := least(100, greatest(0.01, 100.0 * p_sample / greatest(v_rows, 1)));
        v_from := v_pfx || ' e tablesample system (' || v_pct || ')';
    end if;
    return query execute format($q$
        with s as materialized (
            select (o - 1)::int as slot, sub, snap::%3$s as snap from unnest($1::int4[], $2::text[]) with ordinality u(sub, snap, o)),
        ev as materialized (
            select s.slot, coalesce(e.ev_extra1, '') as key, (e.ctid::text::point)[0]::int8 as page
              from %1$s join s on s.slot = %4$s
             where e.ev_txid >= (select min(%2$s(snap)) from s)
               and (e.ev_owner is null or e.ev_owner = s.sub) and not %5$s(e.ev_txid, s.snap)),
        kp as materialized (select slot, key, page, count(*)::float8 as y from ev group by 1, 2, 3),
        px as materialized (select page, sum(y) as x from kp group by 1),
        m as (select coalesce(sum(x), 0) as n, count(*)::float8 as pages, coalesce(sum(x * x), 0) as xx from px),
        k as (select kp.slot, kp.key, sum(kp.y) as y from kp group by 1, 2),
        est as (
            select k.slot, k.key, k.y,
                   case when $3 then k.y else k.y / greatest(m.n, 1) * $4 end as pending
              from k, m),
        err as (
            -- The larger of two standard errors of the key's share R = sum
            -- y / sum x: sampled pages as clusters (y_b the key's events in
            -- page b, x_b the page's: var(R) = sum_b (y_b - R x_b)^2 / (pages
            -- (pages - 1) mean(x)^2), over every sampled page, those without
            -- the key too), and the events as if drawn one by one
            -- (R (1 - R) / n): neither alone is safe on every layout.
            select kp.slot, kp.key,
                   greatest(
                     sqrt(greatest(sum(kp.y * kp.y - 2 * (k.y / m.n) * kp.y * px.x) + (k.y / m.n) ^ 2 * m.xx, 0)
                          / greatest(m.pages * (m.pages - 1), 1)) / greatest(m.n / m.pages, 1),
                     sqrt((k.y / m.n) * (1 - k.y / m.n) / m.n)) as se
              from kp join px using (page) join k using (slot, key) cross join m
             where m.n > 0
             group by kp.slot, kp.key, k.y, m.n, m.pages, m.xx),
        ranked as (
            select est.*, coalesce(err.se, 0) as se,
                   row_number() over (order by est.pending desc, est.key) as overall,
                   row_number() over (partition by est.slot order by est.pending desc, est.key) as in_slot
              from est left join err using (slot, key))
        select 'key'::text, slot, key, round(pending)::int8,
               case when $3 then 0 else ceil(1.96 * se * $4)::int8 end, null::interval
          from ranked where overall <= $5 or in_slot = 1
        union all
        select 'meta', null, null, (select n from m)::int8, case when $3 then 0 else 1 end, null$q$,
        v_from, e.xmin, e.snap, v_slot, e.vis) using v_subs, v_snaps, v_exact, p_total, p_top;
    -- The oldest pending event of each slot, among the first p_window
    -- events after the slowest position.
    return query execute format($q$
        with s as materialized (
            select (o - 1)::int as slot, sub, snap::%3$s as snap from unnest($1::int4[], $2::text[]) with ordinality u(sub, snap, o)),
        ev as (select e.ev_txid, e.ev_owner, e.ev_time, e.ev_extra1 from %1$s e
                where e.ev_txid >= (select min(%2$s(snap)) from s) order by e.ev_txid limit $3)
        select distinct on (s.slot) 'oldest'::text, s.slot, coalesce(ev.ev_extra1, ''), null::int8, null::int8, greatest(now() - ev.ev_time, '0')
          from ev join s on s.slot = %4$s
         where (ev.ev_owner is null or ev.ev_owner = s.sub) and not %5$s(ev.ev_txid, s.snap)
         order by s.slot, ev.ev_time$q$,
        v_pfx, e.xmin, e.snap, replace(v_slot, 'e.', 'ev.'), e.vis) using v_subs, v_snaps, p_window;
end
$function$;
REVOKE ALL ON FUNCTION partitionq.group_keys(text,text,text,integer,integer,bigint,bigint,bigint,bigint) FROM PUBLIC;

-- function/has_generations.sql
-- Whether the group has recorded its generations (a group set up before
-- version 5 has none until its first resize): a claim makes a slot's
-- ownership row only for such a group.
--
-- SECURITY DEFINER: lease's claim calls it in its own statement (the
-- generation table is store's); sql/roles.sql grants it to the worker.
CREATE OR REPLACE FUNCTION partitionq.has_generations(p_queue text, p_grp text)
 RETURNS boolean
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'partitionq', 'pg_temp'
AS $function$
    select exists (select 1 from partitionq.generation where queue = p_queue and grp = p_grp)
$function$;
REVOKE ALL ON FUNCTION partitionq.has_generations(text,text) FROM PUBLIC;

-- function/owner_generation.sql
-- The ownership check of a slot's owner: the generation of slot p_slot of
-- the group's generation of p_n slots when the slot is owned at epoch
-- p_epoch, else null. The row stays locked for share until the caller's
-- transaction ends, so a takeover waits for it. check_owner answers with
-- it; record_done and record_done_all record their completions in the
-- generation it finds. Granted to nobody: those functions call it as the
-- schema's owner.
CREATE OR REPLACE FUNCTION partitionq.owner_generation(p_queue text, p_grp text, p_n integer, p_slot integer, p_epoch bigint)
 RETURNS integer
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
    v_gen int;
begin
    select generation into v_gen from partitionq.slot
     where queue = p_queue and grp = p_grp and n = p_n and slot = p_slot and epoch = p_epoch and worker_id is not null
       for share;
    return v_gen;
end
$function$;
REVOKE ALL ON FUNCTION partitionq.owner_generation(text,text,integer,integer,bigint) FROM PUBLIC;

-- function/purge_dead_letters.sql
-- Deletes dead letters of a group (only p_ids when not null; only those
-- dead before p_before when not null) and writes one audit entry with the
-- count (and the key when they share one), then p_note in parentheses (a
-- bulk purge's filter, free text like the reason); returns the count and
-- the entry's id.
CREATE OR REPLACE FUNCTION partitionq.purge_dead_letters(p_queue text, p_grp text, p_ids bigint[], p_before timestamp with time zone, p_reason text, p_actor text, p_note text, OUT purged bigint, OUT audit_id bigint)
 RETURNS record
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'partitionq', 'pg_temp'
AS $function$
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
$function$;
REVOKE ALL ON FUNCTION partitionq.purge_dead_letters(text,text,bigint[],timestamp with time zone,text,text,text) FROM PUBLIC;

-- function/record_action.sql
-- The audit entry of an action that writes no record: retry now, an action
-- whose head was already resolved, a replay already done, a group dropped
-- (once its slots are gone). Skips,
-- quarantines, replays and purges are recorded by the functions that do
-- them (PQ002 here).
CREATE OR REPLACE FUNCTION partitionq.record_action(p_actor text, p_action text, p_queue text, p_grp text, p_key text, p_ev_id bigint, p_reason text, p_outcome text)
 RETURNS bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'partitionq', 'pg_temp'
AS $function$
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
$function$;
REVOKE ALL ON FUNCTION partitionq.record_action(text,text,text,text,text,bigint,text,text) FROM PUBLIC;

-- function/record_done.sql
-- An exactly-once handler's completion: recorded in the handler's own
-- transaction, after the ownership check (SQLSTATE PQ001 when not owned).
CREATE OR REPLACE FUNCTION partitionq.record_done(p_queue text, p_grp text, p_n integer, p_slot integer, p_epoch bigint, p_batch bigint, p_ev_id bigint)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
    v_gen int;
begin
    v_gen := partitionq.owner_generation(p_queue, p_grp, p_n, p_slot, p_epoch);
    if v_gen is null then
        raise exception 'slot % of % of group % on queue % is not owned at epoch %', p_slot, p_n, p_grp, p_queue, p_epoch
              using errcode = 'PQ001';
    end if;
    insert into partitionq.slot_done (queue, grp, generation, slot, batch_id, ev_id)
    values (p_queue, p_grp, v_gen, p_slot, p_batch, p_ev_id) on conflict do nothing;
end
$function$;
REVOKE ALL ON FUNCTION partitionq.record_done(text,text,integer,integer,bigint,bigint,bigint) FROM PUBLIC;

-- function/record_done_all.sql
-- An exactly-once run handler's completion (TxRunHandler): the events
-- p_ev_ids of one batch recorded done in the handler's own transaction,
-- after one ownership check (SQLSTATE PQ001 when not owned), with one
-- insert: record_done for a run, without a call per event.
CREATE OR REPLACE FUNCTION partitionq.record_done_all(p_queue text, p_grp text, p_n integer, p_slot integer, p_epoch bigint, p_batch bigint, p_ev_ids bigint[])
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
    v_gen int;
begin
    v_gen := partitionq.owner_generation(p_queue, p_grp, p_n, p_slot, p_epoch);
    if v_gen is null then
        raise exception 'slot % of % of group % on queue % is not owned at epoch %', p_slot, p_n, p_grp, p_queue, p_epoch
              using errcode = 'PQ001';
    end if;
    insert into partitionq.slot_done (queue, grp, generation, slot, batch_id, ev_id)
    select p_queue, p_grp, v_gen, p_slot, p_batch, id from unnest(p_ev_ids) as id on conflict do nothing;
end
$function$;
REVOKE ALL ON FUNCTION partitionq.record_done_all(text,text,integer,integer,bigint,bigint,bigint[]) FROM PUBLIC;

-- function/record_replay.sql
-- An operator records replays: dead letter p_ids[i] was sent again as
-- event p_ev_ids[i], which this transaction inserted into the queue with
-- the dead letter's key, type and payload (PQ002 otherwise). One audit
-- entry: the dead letter's key and event for one, the count for several
-- (the key too when they share one), then p_note in parentheses (a bulk
-- replay's filter, free text like the reason); returns the count and the
-- entry's id. A bulk replay that found nothing to send records a count of 0.
CREATE OR REPLACE FUNCTION partitionq.record_replay(p_engine text, p_queue text, p_grp text, p_ids bigint[], p_ev_ids bigint[], p_reason text, p_actor text, p_note text, OUT replayed integer, OUT audit_id bigint)
 RETURNS record
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'partitionq', 'pg_temp'
AS $function$
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
$function$;
REVOKE ALL ON FUNCTION partitionq.record_replay(text,text,text,bigint[],bigint[],text,text,text) FROM PUBLIC;

-- function/refuse_old_worker.sql
-- Workers say which schema version they were built for
-- (worker.schema_version). A worker built for a version before 17 keys
-- slots by their N, not by their generation (a worker of partitionq before
-- v0.3 says nothing at all): the trigger worker_version on
-- partitionq.worker refuses it with this function when it registers or
-- renews its lease, with an error naming the fix.
CREATE OR REPLACE FUNCTION partitionq.refuse_old_worker()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
    if new.schema_version is null or new.schema_version < 17 then
        raise exception 'partitionq''s schema in this database is version 17 or newer, which names slots by their generation; this worker (%, on %) was built for %: stop it and run a partitionq that knows schema version 17 or later (docs/operations.md, "Upgrading partitionq''s schema")',
              new.identity, new.host, coalesce('version ' || new.schema_version, 'a version before 5') using errcode = 'PQ005';
    end if;
    return new;
end
$function$;
REVOKE ALL ON FUNCTION partitionq.refuse_old_worker() FROM PUBLIC;

-- function/resize.sql
-- Starts a resize of a group to p_slots slots; returns the new
-- generation's number. One resize at a time (PQ007 while one is in
-- flight). Nothing is registered yet: the new slots' consumers are
-- registered at the cutover (resize_cutover), the first tick that sees
-- this transaction committed. Refused while a worker of an earlier
-- partitionq is live (it would not stop its old slots at the cutover).
--
-- The steps of a resize run as the schema's owner (SECURITY DEFINER,
-- search_path pinned), who has the engine's rights; the engine's schema is
-- an argument checked against the two known names and quoted with %I. Only
-- the engine's own functions register, reposition and unregister consumers
-- and put events in the retry queue. The resize in flight is the
-- generation whose resize_txid is set (a generation keeps parent_slots
-- after its resize ends).
CREATE OR REPLACE FUNCTION partitionq.resize(p_engine text, p_queue text, p_grp text, p_slots integer, p_actor text, p_reason text)
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'partitionq', 'pg_temp'
AS $function$
declare
    v_gen    partitionq.generation;
    v_newest bigint;
    v_old    text;
    v_number int;
begin
    if p_slots is null or p_slots < 1 or p_slots > 256 then
        raise exception 'a group has 1 to 256 slots, not %', p_slots using errcode = '22023';
    end if;
    perform partitionq.ensure_generation(p_engine, p_queue, p_grp);
    -- One resize of a group at a time: its generation rows are locked.
    perform 1 from partitionq.generation where queue = p_queue and grp = p_grp for update;
    if (select count(*) from partitionq.generation where queue = p_queue and grp = p_grp) > 1 then
        select * into v_gen from partitionq.generation
         where queue = p_queue and grp = p_grp and parent_slots is not null and resize_txid is not null;
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
    insert into partitionq.slot (queue, grp, generation, n, slot)
    select p_queue, p_grp, v_gen.number, v_gen.slots, s from generate_series(0, v_gen.slots - 1) s
        on conflict do nothing;
    -- A number is never used twice in a group: past one an aborted resize used.
    v_number := greatest(v_gen.number, coalesce(v_gen.aborted, 0)) + 1;
    insert into partitionq.generation (queue, grp, slots, number, parent_slots, parent_number, resize_txid, resize_after, actor, reason)
    values (p_queue, p_grp, p_slots, v_number, v_gen.slots, v_gen.number, txid_current(), coalesce(v_newest, 0),
            coalesce(p_actor, ''), coalesce(p_reason, ''));
    insert into partitionq.audit (db_role, actor, action, queue, grp, reason, outcome)
    values (session_user, coalesce(p_actor, ''), 'resize', p_queue, p_grp, coalesce(p_reason, ''),
            format('started: %s to %s slots (generation %s)', v_gen.slots, p_slots, v_number));
    perform pg_notify('partitionq_slots', p_queue || '/' || p_grp);
    return v_number;
end
$function$;
REVOKE ALL ON FUNCTION partitionq.resize(text,text,text,integer,text,text) FROM PUBLIC;

-- function/resize_abort.sql
-- Aborts a resize whose cutover has not begun: no old slot handed off
-- (PQ009 otherwise). The new generation's consumers, registered at the
-- cutover, hold nothing yet (their slots wait for their parents): they are
-- unregistered, and the old generation goes on past the cutover; the
-- aborted generation's number is never used again (resize.sql).
-- A step of a resize, run as the schema's owner like the others
-- (resize.sql says how).
CREATE OR REPLACE FUNCTION partitionq.resize_abort(p_engine text, p_queue text, p_grp text, p_actor text, p_reason text)
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'partitionq', 'pg_temp'
AS $function$
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
    select count(*) into v_left from partitionq.slot where queue = p_queue and grp = p_grp and generation = v_gen.parent_number;
    if v_left < v_gen.parent_slots then
        raise exception 'the resize of group % on queue % from % to % slots is past its cutover: % old slots were handed off to the new ones, so it can only complete (partitionq resize --wait)',
              p_grp, p_queue, v_gen.parent_slots, v_gen.slots, v_gen.parent_slots - v_left using errcode = 'PQ009';
    end if;
    if v_gen.cutover_tick is not null then
        for i in 0 .. v_gen.slots - 1 loop
            execute format('select %I.unregister_consumer($1, $2)', p_engine) using p_queue, p_grp || '#' || i || '/' || v_gen.slots;
        end loop;
    end if;
    delete from partitionq.slot_progress where queue = p_queue and grp = p_grp and generation = v_gen.number;
    delete from partitionq.slot_done where queue = p_queue and grp = p_grp and generation = v_gen.number;
    delete from partitionq.slot_rate where queue = p_queue and grp = p_grp and generation = v_gen.number;
    delete from partitionq.slot where queue = p_queue and grp = p_grp and generation = v_gen.number;
    delete from partitionq.generation where queue = p_queue and grp = p_grp and slots = v_gen.slots;
    -- The aborted number is not used again (resize.sql).
    update partitionq.generation set aborted = greatest(v_gen.number, coalesce(aborted, 0))
     where queue = p_queue and grp = p_grp and slots = v_gen.parent_slots;
    insert into partitionq.audit (db_role, actor, action, queue, grp, reason, outcome)
    values (session_user, coalesce(p_actor, ''), 'resize', p_queue, p_grp, coalesce(p_reason, ''),
            format('aborted: %s to %s slots', v_gen.parent_slots, v_gen.slots));
    perform pg_notify('partitionq_slots', p_queue || '/' || p_grp);
    return v_gen.parent_slots;
end
$function$;
REVOKE ALL ON FUNCTION partitionq.resize_abort(text,text,text,text,text) FROM PUBLIC;

-- function/resize_cutover.sql
-- The cutover of a resize in flight: once the queue has a tick that sees
-- the resize committed, the first such tick is the cutover. The new
-- slots' consumers are registered at it (each must be new: registering an
-- existing consumer at a tick would reposition it) with their ownership
-- rows, and the subscriptions of the old slots are recorded for the new
-- slots' reads. Idempotent; returns the cutover tick, or null while there
-- is none (or no resize). The new slots' epochs start at the generation's
-- number times 2^32, above every epoch of the generations before it: an
-- epoch names one generation of the group (check_owner).
-- A step of a resize, run as the schema's owner like the others
-- (resize.sql says how).
CREATE OR REPLACE FUNCTION partitionq.resize_cutover(p_engine text, p_queue text, p_grp text)
 RETURNS bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'partitionq', 'pg_temp'
AS $function$
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
    -- Epochs start at the generation's number times 2^32: above any epoch
    -- of an earlier generation.
    insert into partitionq.slot (queue, grp, generation, n, slot, epoch)
    select p_queue, p_grp, v_gen.number, v_gen.slots, s, v_gen.number::bigint << 32 from generate_series(0, v_gen.slots - 1) s
        on conflict do nothing;
    update partitionq.generation set cutover_tick = v_tick, parent_subs = coalesce(v_subs, '{}')
     where queue = p_queue and grp = p_grp and slots = v_gen.slots;
    perform pg_notify('partitionq_slots', p_queue || '/' || p_grp);
    return v_tick;
end
$function$;
REVOKE ALL ON FUNCTION partitionq.resize_cutover(text,text,text) FROM PUBLIC;

-- function/resize_handoff.sql
-- An old slot drained to the cutover hands its blocked keys to the new
-- generation and leaves the engine: its owner, at its epoch, calls this
-- once the slot's consumer stands at the cutover tick with no open batch
-- (and no drain of it runs). Under the retry mover's table lock, every
-- retry-queue row of the old consumer (parked heads and waiting events,
-- timed retries) is put, through the engine's event_retry_raw with the same
-- retry time and count, into the retry queue of the key's new slot, and
-- its failure record follows it; then the old consumer is unregistered
-- (which would have deleted those rows) and its ownership, progress and
-- rate rows go. When it was the old generation's last slot, the resize is
-- complete. Returns whether the resize is complete.
-- A step of a resize, run as the schema's owner like the others
-- (resize.sql says how).
CREATE OR REPLACE FUNCTION partitionq.resize_handoff(p_engine text, p_queue text, p_grp text, p_slot integer, p_epoch bigint)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'partitionq', 'pg_temp'
AS $function$
declare
    v_gen  partitionq.generation;
    v_old  text;
    v_sub  record;
    v_slot text;
    v_left int;
begin
    select * into v_gen from partitionq.generation
     where queue = p_queue and grp = p_grp and parent_slots is not null and resize_txid is not null for update;
    if not found or v_gen.cutover_tick is null then
        raise exception 'group % on queue % has no resize past its cutover: slot % has nothing to hand off', p_grp, p_queue, p_slot
              using errcode = 'PQ002';
    end if;
    perform 1 from partitionq.slot
     where queue = p_queue and grp = p_grp and generation = v_gen.parent_number and slot = p_slot and epoch = p_epoch and worker_id is not null
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
    delete from partitionq.slot_progress where queue = p_queue and grp = p_grp and generation = v_gen.parent_number and slot = p_slot;
    delete from partitionq.slot_done where queue = p_queue and grp = p_grp and generation = v_gen.parent_number and slot = p_slot;
    delete from partitionq.slot_rate where queue = p_queue and grp = p_grp and generation = v_gen.parent_number and slot = p_slot;
    delete from partitionq.slot where queue = p_queue and grp = p_grp and generation = v_gen.parent_number and slot = p_slot;
    select count(*) into v_left from partitionq.slot where queue = p_queue and grp = p_grp and generation = v_gen.parent_number;
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
$function$;
REVOKE ALL ON FUNCTION partitionq.resize_handoff(text,text,text,integer,bigint) FROM PUBLIC;

-- function/send.sql
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
CREATE OR REPLACE FUNCTION partitionq.send(queue text, key text, type text DEFAULT NULL::text, payload text DEFAULT NULL::text, dedup_id text DEFAULT NULL::text, dedup_window interval DEFAULT NULL::interval, engine text DEFAULT NULL::text, OUT event_id bigint, OUT duplicate boolean)
 RETURNS record
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
$function$;
REVOKE ALL ON FUNCTION partitionq.send(text,text,text,text,text,interval,text) FROM PUBLIC;

-- function/set_aside.sql
-- An operator skips or quarantines events parked for a slot (PQ002 for one
-- that is not parked there); attempts and last error from their failure
-- records; the dead letter records the slot's generation (its N); one
-- audit entry.
CREATE OR REPLACE FUNCTION partitionq.set_aside(p_engine text, p_queue text, p_grp text, p_slot integer, p_consumer text, p_action text, p_ev_ids bigint[], p_reason text, p_actor text)
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'partitionq', 'pg_temp'
AS $function$
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
$function$;
REVOKE ALL ON FUNCTION partitionq.set_aside(text,text,text,integer,text,text,bigint[],text,text) FROM PUBLIC;

-- function/slot_count.sql
-- N of a slot consumer name "<group>#<slot>/<N>", checked against the group and slot.
CREATE OR REPLACE FUNCTION partitionq.slot_count(p_grp text, p_slot integer, p_consumer text)
 RETURNS integer
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
$function$;
REVOKE ALL ON FUNCTION partitionq.slot_count(text,integer,text) FROM PUBLIC;

-- ============================================================== triggers
-- made by the migrations; here after the functions they call

CREATE TRIGGER worker_version BEFORE INSERT OR UPDATE ON partitionq.worker FOR EACH ROW EXECUTE FUNCTION partitionq.refuse_old_worker();
