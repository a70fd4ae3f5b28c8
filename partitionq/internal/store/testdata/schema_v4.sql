-- partitionq's schema at version 4, as partitionq/internal/store wrote it at
-- commit 5df6648 (v0.2), for the migration test. Frozen: do not edit.

create schema if not exists partitionq;
create table if not exists partitionq.schema_version (version int not null);
create table if not exists partitionq.failure (
    queue           text        not null,
    consumer        text        not null,
    ev_id           bigint      not null,
    attempts        int         not null,
    last_error      text        not null default '',
    first_failed_at timestamptz not null default now(),
    last_failed_at  timestamptz not null default now(),
    next_attempt_at timestamptz not null,
    primary key (queue, consumer, ev_id)
);
create table if not exists partitionq.dead_letter (
    id          bigserial   primary key,
    queue       text        not null,
    grp         text        not null,
    slot        int         not null,
    ev_id       bigint      not null,
    ev_time     timestamptz not null,
    ev_type     text        not null,
    ev_data     text        not null,
    key         text        not null,
    attempts    int         not null,
    last_error  text        not null default '',
    reason      text        not null,
    actor       text        not null default '',
    db_role     text        not null default session_user,
    dead_at     timestamptz not null default now(),
    replayed_at timestamptz,
    replay_ev_id bigint
);
create index if not exists dead_letter_group on partitionq.dead_letter (queue, grp, id);
create unique index if not exists dead_letter_event on partitionq.dead_letter (queue, grp, ev_id);
create table if not exists partitionq.audit (
    id      bigserial   primary key,
    at      timestamptz not null default now(),
    db_role text        not null default session_user,
    actor   text        not null default '',
    action  text        not null,
    queue   text        not null,
    grp     text        not null,
    key     text,
    ev_id   bigint,
    reason  text        not null default '',
    outcome text        not null default ''
);
create index if not exists audit_group on partitionq.audit (queue, grp, id);
alter table partitionq.failure add column if not exists flagged_at timestamptz;

-- Slot ownership (docs/architecture.md, "Slot ownership"). A worker holds
-- a lease it renews about once a second; a slot is owned by the worker its
-- row names, at its epoch, while that worker's lease lasts. Every write that
-- ends work on a slot checks the epoch in its own transaction.
create table if not exists partitionq.worker (
    id            bigserial   primary key,
    identity      text        not null,
    host          text        not null default '',
    os_pid        int         not null default 0,
    db_role       text        not null default session_user,
    -- the lease session: while it lives, the lease is not taken over (null
    -- behind a connection pooler, where sessions are not the worker's)
    backend_pid   int,
    backend_start timestamptz,
    started_at    timestamptz not null default clock_timestamp(),
    renewed_at    timestamptz not null default clock_timestamp(),
    lease_until   timestamptz not null
);
create table if not exists partitionq.slot (
    queue     text        not null,
    grp       text        not null,
    slot      int         not null,
    n         int         not null,
    worker_id bigint,
    epoch     bigint      not null default 0,
    since     timestamptz,
    primary key (queue, grp, slot)
);
create index if not exists slot_worker on partitionq.slot (worker_id);
-- Progress inside a slot's open batch (docs/guarantees.md, "What repeats
-- after a crash"): every event of the batch's share at or below done_below,
-- and those listed in done (delta-encoded ids above it), are resolved.
create table if not exists partitionq.slot_progress (
    queue      text        not null,
    grp        text        not null,
    slot       int         not null,
    batch_id   bigint,
    done_below bigint      not null default 0,
    done       bytea       not null default '',
    handled    bigint      not null default 0,
    failed     bigint      not null default 0,
    updated_at timestamptz not null default clock_timestamp(),
    primary key (queue, grp, slot)
);
alter table partitionq.slot_progress add column if not exists finished_at timestamptz;
-- Handler outcomes per slot and second (unix seconds), added by every
-- progress flush and batch finish of the slot's owner: the rates Status
-- reports over the last 10 s and minute, whatever the number of workers.
-- Rows older than two minutes are deleted by the writes that add new ones,
-- so a slot has at most about 120 rows.
create table if not exists partitionq.slot_rate (
    queue   text   not null,
    grp     text   not null,
    slot    int    not null,
    sec     bigint not null,
    handled bigint not null default 0,
    failed  bigint not null default 0,
    primary key (queue, grp, slot, sec)
);
-- Events whose exactly-once handler committed in the open batch (TxHandler).
create table if not exists partitionq.slot_done (
    queue    text   not null,
    grp      text   not null,
    slot     int    not null,
    batch_id bigint not null,
    ev_id    bigint not null,
    primary key (queue, grp, slot, ev_id)
);
-- Whose turn a ticker round is: a row lock (tick, retry) or a lease (maint),
-- which only the roles granted update on this table can take.
create table if not exists partitionq.ticker_turn (
    name   text        primary key,
    holder text,
    until  timestamptz
);
insert into partitionq.ticker_turn (name) values ('tick'), ('retry'), ('maint') on conflict do nothing;

-- The fencing token, for handlers' own transactions: is the slot still
-- owned at this epoch? The row stays locked for share until the caller's
-- transaction ends, so a takeover waits for it.
create or replace function partitionq.check_owner(p_queue text, p_grp text, p_slot int, p_epoch bigint)
returns boolean language plpgsql security definer set search_path = pg_catalog, pg_temp as $f$
begin
    perform 1 from partitionq.slot
     where queue = p_queue and grp = p_grp and slot = p_slot and epoch = p_epoch and worker_id is not null
       for share;
    return found;
end
$f$;
-- An exactly-once handler's completion: recorded in the handler's own
-- transaction, after the ownership check (SQLSTATE PQ001 when not owned).
create or replace function partitionq.record_done(p_queue text, p_grp text, p_slot int, p_epoch bigint, p_batch bigint, p_ev_id bigint)
returns void language plpgsql security definer set search_path = pg_catalog, pg_temp as $f$
begin
    if not partitionq.check_owner(p_queue, p_grp, p_slot, p_epoch) then
        raise exception 'slot % of group % on queue % is not owned at epoch %', p_slot, p_grp, p_queue, p_epoch
              using errcode = 'PQ001';
    end if;
    insert into partitionq.slot_done (queue, grp, slot, batch_id, ev_id)
    values (p_queue, p_grp, p_slot, p_batch, p_ev_id) on conflict do nothing;
end
$f$;
revoke all on function partitionq.check_owner(text, text, int, bigint) from public;
revoke all on function partitionq.record_done(text, text, int, bigint, bigint, bigint) from public;
-- The events among p_ids of the slot p_slot (of p_n) that consumer
-- p_consumer of queue p_queue may give up: its own rows of the retry queue
-- (parked, or a timed retry), and the events of its open batch (the
-- engine's own description of the batch, batch_event_sql, which keeps the
-- retried events of this consumer only). An event of
-- another slot, of no open batch, or already resolved is not returned.
create or replace function partitionq.engine_events(p_engine text, p_queue text, p_consumer text, p_n int, p_slot int, p_ids bigint[])
returns table (ev_id bigint, ev_time timestamptz, ev_retry int, ev_type text, ev_data text, ev_key text, parked boolean)
language plpgsql stable set search_path = pg_catalog, pg_temp as $f$
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
$f$;
-- The event p_ev_id of queue p_queue if the current transaction inserted
-- it (a replay is sent and recorded in one transaction).
create or replace function partitionq.engine_own_event(p_engine text, p_queue text, p_ev_id bigint)
returns table (ev_type text, ev_data text, ev_key text)
language plpgsql stable set search_path = pg_catalog, pg_temp as $f$
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
$f$;
revoke all on function partitionq.engine_events(text, text, text, int, int, bigint[]) from public;
revoke all on function partitionq.engine_own_event(text, text, bigint) from public;
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

-- A worker gives events of its slot up: each must be in the slot's open
-- batch or in its retry queue (PQ002 otherwise). Content from the engine.
create or replace function partitionq.give_up(p_engine text, p_queue text, p_grp text, p_slot int, p_consumer text,
    p_ev_ids bigint[], p_attempts int[], p_errors text[], p_reasons text[])
returns int language plpgsql security definer set search_path = pg_catalog, partitionq, pg_temp as $f$
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
        insert into partitionq.dead_letter (queue, grp, slot, ev_id, ev_time, ev_type, ev_data, key, attempts,
                                            last_error, reason, actor, db_role)
        select p_queue, p_grp, p_slot, ev.ev_id, ev.ev_time, ev.ev_type, ev.ev_data, coalesce(ev.ev_key, ''),
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
$f$;

-- An operator skips or quarantines events parked for a slot (PQ002 for one
-- that is not parked there); attempts and last error from their failure
-- records; one audit entry.
create or replace function partitionq.set_aside(p_engine text, p_queue text, p_grp text, p_slot int, p_consumer text,
    p_action text, p_ev_ids bigint[], p_reason text, p_actor text)
returns int language plpgsql security definer set search_path = pg_catalog, partitionq, pg_temp as $f$
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
        insert into partitionq.dead_letter (queue, grp, slot, ev_id, ev_time, ev_type, ev_data, key, attempts,
                                            last_error, reason, actor, db_role)
        select p_queue, p_grp, p_slot, ev.ev_id, ev.ev_time, ev.ev_type, ev.ev_data, coalesce(ev.ev_key, ''),
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
$f$;

-- An operator records replays: dead letter p_ids[i] was sent again as
-- event p_ev_ids[i], which this transaction inserted into the queue with
-- the dead letter's key, type and payload (PQ002 otherwise). One audit
-- entry: the dead letter's key and event for one, the count for several
-- (the key too when they share one), then p_note in parentheses (a bulk
-- replay's filter, free text like the reason); returns the count and the
-- entry's id. A bulk replay that found nothing to send records a count of 0.
create or replace function partitionq.record_replay(p_engine text, p_queue text, p_grp text, p_ids bigint[], p_ev_ids bigint[],
    p_reason text, p_actor text, p_note text, out replayed int, out audit_id bigint)
language plpgsql security definer set search_path = pg_catalog, partitionq, pg_temp as $f$
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
$f$;

-- Deletes dead letters of a group (only p_ids when not null; only those
-- dead before p_before when not null) and writes one audit entry with the
-- count (and the key when they share one), then p_note in parentheses (a
-- bulk purge's filter, free text like the reason); returns the count and
-- the entry's id.
create or replace function partitionq.purge_dead_letters(p_queue text, p_grp text, p_ids bigint[], p_before timestamptz,
    p_reason text, p_actor text, p_note text, out purged bigint, out audit_id bigint)
language plpgsql security definer set search_path = pg_catalog, partitionq, pg_temp as $f$
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
$f$;

-- The audit entry of an action that writes no record: retry now, an action
-- whose head was already resolved, a replay already done, a group dropped
-- (once its slots are gone). Skips,
-- quarantines, replays and purges are recorded by the functions that do
-- them (PQ002 here).
create or replace function partitionq.record_action(p_actor text, p_action text, p_queue text, p_grp text, p_key text,
    p_ev_id bigint, p_reason text, p_outcome text)
returns bigint language plpgsql security definer set search_path = pg_catalog, partitionq, pg_temp as $f$
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
$f$;

revoke all on function partitionq.slot_count(text, int, text) from public;
revoke all on function partitionq.give_up(text, text, text, int, text, bigint[], int[], text[], text[]) from public;
revoke all on function partitionq.set_aside(text, text, text, int, text, text, bigint[], text, text) from public;
revoke all on function partitionq.record_replay(text, text, text, bigint[], bigint[], text, text, text) from public;
revoke all on function partitionq.purge_dead_letters(text, text, bigint[], timestamptz, text, text, text) from public;
revoke all on function partitionq.record_action(text, text, text, text, text, bigint, text, text) from public;
insert into partitionq.schema_version values (4);
