-- Version 5: online resize. A group's slot count (N) belongs to a
-- generation; a resize starts the next one, whose slots take over at a
-- cutover tick (docs/architecture.md, "Resizing a group"). Ownership,
-- progress, rate and completion rows name the N of their generation;
-- dead letters say it too. Workers record the schema version they were
-- built for, and workers of an earlier partitionq (which do not know
-- generations) are refused with an error that says so.
--
-- Needs function/refuse_old_worker.sql

-- The generations of a group: one row, or two while a resize is in
-- flight (the old one, draining to the cutover, and the new one). A group
-- set up before version 5 has none until its next setup or resize: it is
-- its first generation, with the N of its engine consumers.
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
-- generations, and would read an old generation's slots past its cutover;
-- function/refuse_old_worker.sql).
alter table partitionq.worker add column schema_version int;
create trigger worker_version before insert or update on partitionq.worker
    for each row execute function partitionq.refuse_old_worker();

-- The fencing token names the slot's generation: check_owner and
-- record_done of version 3 go (a schema made at another version never had
-- them), for the ones with the slot's N (function/check_owner.sql,
-- function/record_done.sql). Their grants go with them: sql/roles.sql
-- grants the new ones.
drop function if exists partitionq.record_done(text, text, int, bigint, bigint, bigint);
drop function if exists partitionq.check_owner(text, text, int, bigint);
