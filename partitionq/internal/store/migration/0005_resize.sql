-- Version 5: online resize. A group's slot count (N) belongs to a
-- generation; a resize starts the next one, whose slots take over at a
-- cutover tick (docs/architecture.md, "Resizing a group"). Ownership,
-- progress, rate and completion rows name the N of their generation;
-- dead letters say it too. Workers record the schema version they were
-- built for, and workers of an earlier partitionq (which do not know
-- generations) are refused with an error that says so.

-- The generations of a group: one row, or two while a resize is in
-- flight (the old one, draining to the cutover, and the new one). A group
-- set up before this version has none until its next setup or resize: it
-- is its first generation, with the N of its engine consumers.
create table partitionq.generation (
    queue        text        not null,
    grp          text        not null,
    slots        int         not null check (slots between 1 and 256),
    number       int         not null,
    -- A generation made by a resize: the generation before it (its slots
    -- are the new slots' parents), whose slot consumers' subscription ids
    -- the new slots' reads include (their timed retries re-delivered after
    -- the cutover), and the resize's transaction: the cutover is the first
    -- tick of the queue that sees it committed. The new slots' consumers are
    -- registered at that tick once it exists (cutover_tick set).
    parent_slots int,
    parent_subs  int[]       not null default '{}',
    resize_txid  bigint,
    resize_after bigint,     -- the queue's newest tick when the resize began: the cutover is after it
    cutover_tick bigint,
    created_at   timestamptz not null default now(),
    created_by   text        not null default session_user,
    actor        text        not null default '',
    reason       text        not null default '',
    primary key (queue, grp, slots)
);

-- Ownership, progress, rates and completions name the generation (its N)
-- of their slot: during a resize both generations have a slot 0.
alter table partitionq.slot drop constraint slot_pkey;
alter table partitionq.slot add primary key (queue, grp, n, slot);

alter table partitionq.slot_progress add column n int;
update partitionq.slot_progress p set n = s.n from partitionq.slot s where s.queue = p.queue and s.grp = p.grp and s.slot = p.slot;
delete from partitionq.slot_progress where n is null;
alter table partitionq.slot_progress alter column n set not null;
alter table partitionq.slot_progress drop constraint slot_progress_pkey;
alter table partitionq.slot_progress add primary key (queue, grp, n, slot);

alter table partitionq.slot_rate add column n int;
update partitionq.slot_rate r set n = s.n from partitionq.slot s where s.queue = r.queue and s.grp = r.grp and s.slot = r.slot;
delete from partitionq.slot_rate where n is null;
alter table partitionq.slot_rate alter column n set not null;
alter table partitionq.slot_rate drop constraint slot_rate_pkey;
alter table partitionq.slot_rate add primary key (queue, grp, n, slot, sec);

alter table partitionq.slot_done add column n int;
update partitionq.slot_done d set n = s.n from partitionq.slot s where s.queue = d.queue and s.grp = d.grp and s.slot = d.slot;
delete from partitionq.slot_done where n is null;
alter table partitionq.slot_done alter column n set not null;
alter table partitionq.slot_done drop constraint slot_done_pkey;
alter table partitionq.slot_done add primary key (queue, grp, n, slot, ev_id);

-- A dead letter's slot was of a generation with this many slots (null: a
-- dead letter written before this version).
alter table partitionq.dead_letter add column slots int;
update partitionq.dead_letter d set slots = s.n
  from (select distinct on (queue, grp) queue, grp, n from partitionq.slot order by queue, grp, n) s
 where s.queue = d.queue and s.grp = d.grp;

-- Workers say which schema version they were built for. A worker of an
-- earlier partitionq says nothing: it is refused when it registers or
-- renews its lease, with an error naming the fix (it does not know
-- generations, and would read an old generation's slots past its cutover).
alter table partitionq.worker add column schema_version int;
create function partitionq.refuse_old_worker() returns trigger
language plpgsql set search_path = pg_catalog, pg_temp as $f$
begin
    if new.schema_version is null or new.schema_version < 5 then
        raise exception 'partitionq''s schema in this database is version 5 or newer, which workers of partitionq before v0.3 do not know (they cannot follow a resize): stop this worker (%, on %) and run partitionq v0.3 or later (docs/operations.md, "Upgrading partitionq''s schema")',
              new.identity, new.host using errcode = 'PQ005';
    end if;
    return new;
end
$f$;
create trigger worker_version before insert or update on partitionq.worker
    for each row execute function partitionq.refuse_old_worker();
revoke all on function partitionq.refuse_old_worker() from public;

-- The fencing token names the slot's generation.
drop function partitionq.record_done(text, text, int, bigint, bigint, bigint);
drop function partitionq.check_owner(text, text, int, bigint);
create function partitionq.check_owner(p_queue text, p_grp text, p_n int, p_slot int, p_epoch bigint)
returns boolean language plpgsql security definer set search_path = pg_catalog, pg_temp as $f$
begin
    perform 1 from partitionq.slot
     where queue = p_queue and grp = p_grp and n = p_n and slot = p_slot and epoch = p_epoch and worker_id is not null
       for share;
    return found;
end
$f$;
create function partitionq.record_done(p_queue text, p_grp text, p_n int, p_slot int, p_epoch bigint, p_batch bigint, p_ev_id bigint)
returns void language plpgsql security definer set search_path = pg_catalog, pg_temp as $f$
begin
    if not partitionq.check_owner(p_queue, p_grp, p_n, p_slot, p_epoch) then
        raise exception 'slot % of % of group % on queue % is not owned at epoch %', p_slot, p_n, p_grp, p_queue, p_epoch
              using errcode = 'PQ001';
    end if;
    insert into partitionq.slot_done (queue, grp, n, slot, batch_id, ev_id)
    values (p_queue, p_grp, p_n, p_slot, p_batch, p_ev_id) on conflict do nothing;
end
$f$;
revoke all on function partitionq.check_owner(text, text, int, int, bigint) from public;
revoke all on function partitionq.record_done(text, text, int, int, bigint, bigint, bigint) from public;

-- give_up and set_aside record the dead letter's generation (as 0004 otherwise).
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
$f$;

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
$f$;

-- record_action also records the end of a resize (the worker that hands
-- off an old generation's last slot writes it in resize_handoff).

-- ------------------------------------------------------------------ resize
-- The engine-facing steps of a resize. They run as the schema's owner
-- (SECURITY DEFINER, search_path pinned), who has the engine's rights;
-- the engine's schema is an argument checked against the two known names
-- and quoted with %I. Only the engine's own functions register, reposition
-- and unregister consumers and put events in the retry queue.

-- The subscription of a consumer (null when it is not registered), its
-- position and its open batch.
create function partitionq.engine_sub(p_engine text, p_queue text, p_consumer text,
    out sub_id int, out last_tick bigint, out batch_id bigint)
language plpgsql stable set search_path = pg_catalog, pg_temp as $f$
begin
    if p_engine is null or p_engine not in ('pgq', 'pgque') then
        raise exception 'unknown engine schema %: pgq or pgque', p_engine using errcode = '22023';
    end if;
    execute format('select s.sub_id, s.sub_last_tick, s.sub_batch from %1$I.subscription s join %1$I.queue q on q.queue_id = s.sub_queue
                     join %1$I.consumer c on c.co_id = s.sub_consumer where q.queue_name = $1 and c.co_name = $2', p_engine)
       into sub_id, last_tick, batch_id using p_queue, p_consumer;
end
$f$;

-- The first tick of the queue after p_after whose snapshot sees the
-- transaction p_txid committed (null while there is none).
create function partitionq.engine_first_tick_seeing(p_engine text, p_queue text, p_after bigint, p_txid bigint)
returns bigint language plpgsql stable set search_path = pg_catalog, pg_temp as $f$
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
$f$;

-- A group's first generation, from its engine consumers "<grp>#<s>/<N>",
-- when it has no generation row yet (a group set up before version 5).
create function partitionq.ensure_generation(p_engine text, p_queue text, p_grp text)
returns void language plpgsql set search_path = pg_catalog, pg_temp as $f$
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
$f$;

-- Starts a resize of a group to p_slots slots; returns the new
-- generation's number. One resize at a time (PQ007 while one is in
-- flight). Nothing is registered yet: the new slots' consumers are
-- registered at the cutover (resize_cutover), the first tick that sees
-- this transaction committed. Refused while a worker of an earlier
-- partitionq is live (it would not stop its old slots at the cutover).
create function partitionq.resize(p_engine text, p_queue text, p_grp text, p_slots int, p_actor text, p_reason text)
returns int language plpgsql security definer set search_path = pg_catalog, partitionq, pg_temp as $f$
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
$f$;

-- The cutover of a resize in flight: once the queue has a tick that sees
-- the resize committed, the first such tick is the cutover. The new
-- slots' consumers are registered at it (each must be new: registering an
-- existing consumer at a tick would reposition it) with their ownership
-- rows, and the subscriptions of the old slots are recorded for the new
-- slots' reads. Idempotent; returns the cutover tick, or null while there
-- is none (or no resize).
create function partitionq.resize_cutover(p_engine text, p_queue text, p_grp text)
returns bigint language plpgsql security definer set search_path = pg_catalog, partitionq, pg_temp as $f$
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
$f$;

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
create function partitionq.resize_handoff(p_engine text, p_queue text, p_grp text, p_slot int, p_epoch bigint)
returns boolean language plpgsql security definer set search_path = pg_catalog, partitionq, pg_temp as $f$
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
$f$;

-- Aborts a resize whose cutover has not begun: no old slot handed off
-- (PQ009 otherwise). The new generation's consumers, registered at the
-- cutover, hold nothing yet (their slots wait for their parents): they are
-- unregistered, and the old generation goes on past the cutover.
create function partitionq.resize_abort(p_engine text, p_queue text, p_grp text, p_actor text, p_reason text)
returns int language plpgsql security definer set search_path = pg_catalog, partitionq, pg_temp as $f$
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
$f$;

revoke all on function partitionq.engine_sub(text, text, text) from public;
revoke all on function partitionq.engine_first_tick_seeing(text, text, bigint, bigint) from public;
revoke all on function partitionq.ensure_generation(text, text, text) from public;
revoke all on function partitionq.resize(text, text, text, int, text, text) from public;
revoke all on function partitionq.resize_cutover(text, text, text) from public;
revoke all on function partitionq.resize_handoff(text, text, text, int, bigint) from public;
revoke all on function partitionq.resize_abort(text, text, text, text, text) from public;
