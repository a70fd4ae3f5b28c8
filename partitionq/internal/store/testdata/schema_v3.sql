-- partitionq's schema at version 3 (partitionq/internal/store before the records
-- functions), for the migration test. Frozen: do not edit.

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
insert into partitionq.schema_version values (3);
