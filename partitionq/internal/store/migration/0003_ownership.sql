-- Version 3: worker leases, slot ownership and epochs, progress inside open
-- batches, exactly-once completions, ticker turns.

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
-- Version 3 also had the fencing token and the exactly-once completion
-- (check_owner and record_done, without the generation's N): version 5
-- replaced them, and a new schema gets only those (function/check_owner.sql,
-- function/record_done.sql).
