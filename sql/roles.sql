-- sql/roles.sql: least-privilege roles for partitionq, on PgQ or PgQue.
--
-- Four group roles (NOLOGIN); give each person or service a login role that
-- is a member of one of them (see docs/security.md):
--
--   partitionq_producer  sends events, with dedup ids too  (Client.Send*, partitionq send, partitionq.send in SQL)
--   partitionq_worker    consumes the queue's groups        (Worker, partitionq work without --ticker)
--   partitionq_operator  skip, retry now, quarantine, replay, and everything the viewer sees
--   partitionq_viewer    reads status, blocked keys, dead letters and the audit trail
--                        (partitionq status/blocked/preview/dlq list/audit, the console)
--
-- Setup (partitionq setup / Client.Setup: create_queue, register_consumer, the
-- partitionq schema), purging dead letters, and the ticker (pgqd, partitionq
-- tick, or a worker with RunTicker) stay with the owner: a role that owns the
-- partitionq schema and is a member of pgq_admin / pgque_admin (or a superuser).
--
-- Run it as that owner in each database, after the first partitionq setup
-- (it grants on the tables that setup creates), e.g.
--   psql "$DATABASE_URL" -v ON_ERROR_STOP=1 -f sql/roles.sql
-- It is idempotent. Roles are cluster-wide; the grants are per database.
-- It grants on the engine installed in the database: PgQ (schema pgq) or
-- PgQue (schema pgque); with both installed it grants on both.
--
-- PgQ's own roles (created by `create extension pgq`, see pgq.grant_perms):
--   pgq_writer  insert_event                         -> producer, operator (replay)
--   pgq_reader  next_batch, get_batch_cursor, finish_batch, event_retry,
--               register/unregister_consumer         -> worker
--   pgq_admin   create/drop queues, ticker, maintenance, event_retry_raw,
--               the retry queue                      -> nobody here (the owner)
-- The queue catalog (pgq.queue, consumer, subscription, tick) and
-- get_consumer_info are readable by PUBLIC already.
--
-- PgQue's roles (created by its install file) are the same three under the
-- names pgque_writer, pgque_reader and pgque_admin, with two differences
-- that matter here: PgQue revokes every function from PUBLIC (the viewer is
-- granted get_consumer_info by name), and keeps get_batch_cursor for admins
-- (pgque_reader cannot call it; see docs/engines.md). PgQue grants select on
-- its catalog, its event tables and its retry queue to PUBLIC.
--
-- What partitionq needs beyond the engine's grants, and why (the smallest
-- additions; <e> is pgq or pgque):
--   * <e>.event_retry_raw (admin only): the worker parks a blocked key's
--     events in the retry queue without counting them as failures.
--   * <e>.retry_queue (admin only on PgQ): blocked keys are read from it
--     (viewer: select); the worker and the operator delete resolved rows and
--     lock the head row (select ... for update needs UPDATE on a column, so
--     update is granted on ev_retry only, which the worker also writes);
--     the operator's `lock table ... in share update exclusive mode`
--     (serializing with the engine's retry mover) is allowed by DELETE.
--   * pgque.batch_event_sql(bigint), pgque.batch_event_tables(bigint) and
--     pgque.quote_fqname(text), which the first calls (admin only): the
--     worker reads a batch's events through the engine's own description
--     of the batch.
--   * partitionq.*: failure records (worker, operator). The dead letters
--     and the audit trail are written through functions of partitionq's
--     schema only (SECURITY DEFINER, run as the schema owner, search_path
--     pinned, recording session_user themselves; docs/security.md):
--       give_up             worker    dead letters of events in its slot's open batch or retry queue
--       set_aside           operator  skip and quarantine dead letters, with their audit entry
--       record_replay       operator  marks dead letters replayed (the replay sent in the same transaction)
--       record_action       operator  the audit entry of retry now and of actions that changed nothing
--       purge_dead_letters  nobody    (the owner) deletes dead letters, one audit entry with the count
--       resize, resize_abort nobody   (the owner) changes a group's number of slots (partitionq resize)
--       resize_cutover      worker    registers a resize's new slots at its cutover tick
--       resize_handoff      worker    hands an old slot drained to the cutover off to the new slots
--       event_fate          operator  what became of an event an action names (its key, whether
--                                     set aside or finished; no payload)
--     No role here has INSERT, UPDATE or DELETE on partitionq.dead_letter
--     or partitionq.audit; the viewer reads them.
--   * partitionq.dedup: the dedup records of sends with a dedup id
--     (Message.DedupID, send --dedup-id), written through two functions of
--     the same kind only, in the sending transaction:
--       dedup_claim         producer  claims the ids before the events are inserted (duplicates: the first's event)
--       dedup_record        producer  records each claimed id's event, inserted by the same transaction with its key
--       expire_dedup        nobody    (the owner: the ticker, or cron under pgqd) deletes expired records, bounded
--     The producer reads schema_version (the client checks the schema once)
--     and nothing else; the viewer reads the records (the key view's dedup
--     hits) and the queues' dedup windows (queue_config, written by setup).
--   * Any language (docs/handlers.md), through two functions of the same kind:
--       send                producer  one keyed event, with an optional dedup id, by the Go client's rules
--                                     (select * from partitionq.send('files', 'tenant-42', 'FileCreated', '{}'))
--       fence               worker    a handler's check, in its own transaction, that its worker still
--                                     owns the event's slot (the fence the event carries; PQ001 if not);
--                                     to let a handler's own role call it:
--                                     grant execute on function partitionq.fence(text) to that role

do $roles$
declare
    r text;
begin
    foreach r in array array['partitionq_producer', 'partitionq_worker', 'partitionq_operator', 'partitionq_viewer'] loop
        if not exists (select 1 from pg_roles where rolname = r) then
            execute format('create role %I nologin', r);
        end if;
    end loop;
end
$roles$;

-- ------------------------------------------------- partitionq's own tables
-- The producer has the dedup functions only. The viewer reads them all; the worker records
-- failures and gives events up (give_up); the operator, on top of the
-- viewer, acts on failures, skips and quarantines (set_aside), replays
-- (record_replay) and audits the rest (record_action). Purge (delete dead
-- letters for good) stays with the owner; to allow an operator role:
--   grant execute on function partitionq.purge_dead_letters(text, text, bigint[], timestamptz, text, text, text) to partitionq_operator;
-- Resizing a group (partitionq resize) stays with the owner too, like
-- setup; to allow a role (never the viewer or the worker):
--   grant execute on function partitionq.resize(text, text, text, int, text, text),
--                             partitionq.resize_abort(text, text, text, text, text) to some_admin_role;
grant usage on schema partitionq to partitionq_viewer, partitionq_worker, partitionq_producer;
grant select on partitionq.schema_version, partitionq.failure, partitionq.dead_letter, partitionq.audit,
                partitionq.worker, partitionq.slot, partitionq.slot_progress, partitionq.slot_done, partitionq.generation,
                partitionq.slot_rate, partitionq.dedup, partitionq.queue_config to partitionq_viewer;

-- Send once: claim and record dedup ids in the sending transaction.
grant select on partitionq.schema_version to partitionq_producer;
grant execute on function partitionq.dedup_claim(text, text[], text[], int[], bigint[], boolean),
                          partitionq.dedup_record(text, text, text[], bigint[]) to partitionq_producer;
-- A send from any language, in SQL (docs/handlers.md).
grant execute on function partitionq.send(text, text, text, text, text, interval, text) to partitionq_producer;

grant select on partitionq.schema_version to partitionq_worker;
grant select, insert, update, delete on partitionq.failure to partitionq_worker;
-- Ownership: the worker's lease row, the slots' owners and epochs, the
-- progress inside open batches, exactly-once completions.
grant select, insert, update, delete on partitionq.worker to partitionq_worker;
grant usage on sequence partitionq.worker_id_seq to partitionq_worker;
grant select, insert, update on partitionq.slot to partitionq_worker;
grant select, insert, update on partitionq.slot_progress to partitionq_worker;
grant select, insert, delete on partitionq.slot_done to partitionq_worker;
-- Handler outcomes per slot and second (the rates status shows).
grant select, insert, update, delete on partitionq.slot_rate to partitionq_worker;
grant execute on function partitionq.check_owner(text, text, int, int, bigint),
                          partitionq.record_done(text, text, int, int, bigint, bigint, bigint),
                          partitionq.record_done_all(text, text, int, int, bigint, bigint, bigint[]) to partitionq_worker;
-- The fence a handler in any language checks in its own transaction.
grant execute on function partitionq.fence(text) to partitionq_worker;
-- A group's generations (a resize in flight: the cutover, the parents);
-- workers drive a resize forward: the cutover (registering the new slots
-- at its tick) and the handoff of their old slots, each checked by the
-- function (SECURITY DEFINER, as the schema's owner).
grant select on partitionq.generation to partitionq_worker;
grant execute on function partitionq.resize_cutover(text, text, text),
                          partitionq.resize_handoff(text, text, text, int, bigint),
                          partitionq.has_generations(text, text) to partitionq_worker;
grant execute on function partitionq.give_up(text, text, text, int, bigint, text, bigint[], int[], text[], text[]) to partitionq_worker;

grant partitionq_viewer to partitionq_operator;
grant update (next_attempt_at), delete on partitionq.failure to partitionq_operator;
grant select, delete on partitionq.slot_done to partitionq_operator;
grant execute on function partitionq.set_aside(text, text, text, int, text, text, bigint[], text, text),
                          partitionq.record_replay(text, text, text, bigint[], bigint[], text, text, text),
                          partitionq.record_action(text, text, text, text, text, bigint, text, text) to partitionq_operator;
-- What became of an event an action names (no payload; SECURITY DEFINER).
grant execute on function partitionq.event_fate(text, text, text, text, bigint) to partitionq_operator;
-- Each slot's pending events (status, the console, a worker's metrics),
-- counted without reading a payload: the census of the queue's ticks by
-- slot and the backlog after it (SECURITY DEFINER; docs/security.md).
grant select on partitionq.census, partitionq.census_state to partitionq_viewer;
grant execute on function partitionq.census(text, text, int, bigint),
                          partitionq.group_backlog(text, text, text, int, int8[], int8[], int4[], int8[], bigint),
                          partitionq.group_keys(text, text, text, int, int, bigint, bigint, bigint, bigint)
                       to partitionq_viewer, partitionq_worker;

-- Records are append-only for every role here: what an earlier version of
-- this file (or a DBA) granted on them directly is taken back. The dedup
-- records and windows are written by the functions above and the owner only.
revoke insert, update, delete, truncate, trigger on partitionq.dead_letter, partitionq.audit,
                                                   partitionq.dedup, partitionq.queue_config
    from partitionq_producer, partitionq_worker, partitionq_operator, partitionq_viewer;
revoke usage, update on sequence partitionq.dead_letter_id_seq, partitionq.audit_id_seq
    from partitionq_producer, partitionq_worker, partitionq_operator, partitionq_viewer;
revoke select on partitionq.dead_letter from partitionq_worker; -- give_up needs no read

-- ------------------------------------------------------------- the engine
--   producer  insert_event, through the engine's writer role
--   viewer    the retry queue (blocked keys, their waiting events, set-aside
--             counts; payloads are visible: the console shows them) and
--             get_consumer_info (slot lag); no event table (pending events
--             are counted by partitionq's functions). PgQue grants select on
--             its event tables to PUBLIC: there every role reads them anyway
--   worker    batches through the engine's reader role; park, drain and
--             resolve a blocked key's events in the retry queue
--   operator  (viewer's, plus) skip and quarantine delete parked rows;
--             replay sends again, through the writer role
do $engine$
declare
    q text;
begin
    if to_regprocedure('pgq.next_batch(text,text)') is not null then
        grant pgq_writer to partitionq_producer;

        grant usage on schema pgq to partitionq_viewer;
        grant select on pgq.retry_queue to partitionq_viewer;
        -- No event table: status counts each slot's pending events through
        -- partitionq.census and group_backlog (above), which read them as
        -- the owner and return counts only, so a viewer (and an operator)
        -- cannot read the payloads of events it is not shown. What earlier
        -- versions of this file granted is taken back.
        revoke select on pgq.event_template from partitionq_viewer;
        for q in select queue_data_pfx from pgq.queue loop
            execute format('revoke select on %I.%I from partitionq_viewer', split_part(q, '.', 1), split_part(q, '.', 2));
        end loop;

        grant pgq_reader to partitionq_worker;
        grant execute on function pgq.event_retry_raw(text, text, timestamptz, bigint, timestamptz, integer,
                                                       text, text, text, text, text, text) to partitionq_worker;
        grant select, delete on pgq.retry_queue to partitionq_worker;
        grant update (ev_retry) on pgq.retry_queue to partitionq_worker;

        grant pgq_writer to partitionq_operator;
        grant delete on pgq.retry_queue to partitionq_operator;
        grant update (ev_retry) on pgq.retry_queue to partitionq_operator;
    end if;

    if to_regprocedure('pgque.next_batch(text,text)') is not null then
        grant pgque_writer to partitionq_producer;

        grant usage on schema pgque to partitionq_viewer;
        grant select on pgque.retry_queue to partitionq_viewer;
        grant execute on function pgque.get_consumer_info(text) to partitionq_viewer;

        grant pgque_reader to partitionq_worker;
        grant execute on function pgque.event_retry_raw(text, text, timestamptz, bigint, timestamptz, integer,
                                                         text, text, text, text, text, text) to partitionq_worker;
        grant execute on function pgque.batch_event_sql(bigint), pgque.batch_event_tables(bigint),
                                  pgque.quote_fqname(text) to partitionq_worker;
        grant select, delete on pgque.retry_queue to partitionq_worker;
        grant update (ev_retry) on pgque.retry_queue to partitionq_worker;

        grant pgque_writer to partitionq_operator;
        grant delete on pgque.retry_queue to partitionq_operator;
        grant update (ev_retry) on pgque.retry_queue to partitionq_operator;
    end if;

    if to_regprocedure('pgq.next_batch(text,text)') is null and to_regprocedure('pgque.next_batch(text,text)') is null then
        raise exception 'no queue engine in this database (neither pgq nor pgque): install PgQ or PgQue first, then run partitionq setup';
    end if;
end
$engine$;
