-- Version 7: what became of an event an operator named (event_fate), for
-- actions that tell the truth; the census of each queue's ticks by slot,
-- for each slot's pending events at any backlog (census, group_backlog).
-- All read the engine's event tables through functions of the owner's, so
-- that the viewer and the operator need no right on them (payloads).

-- ------------------------------------------------------ the slot census
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
create table if not exists partitionq.census (
    queue   text          not null,
    n       int           not null,
    tick_id bigint        not null,
    counts  int8[]        not null,
    firsts  timestamptz[] not null,
    owned   jsonb         not null default '{}',
    primary key (queue, n, tick_id)
);
-- Where the census of (queue, N) stands: its base tick and the newest tick
-- it has counted; the row is locked while a session counts.
create table if not exists partitionq.census_state (
    queue   text   not null,
    n       int    not null,
    base    bigint not null,
    tick_id bigint not null,
    primary key (queue, n)
);
