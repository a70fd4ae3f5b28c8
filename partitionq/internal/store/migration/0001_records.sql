-- Version 1: failure records of parked heads, dead letters, the audit trail.
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
