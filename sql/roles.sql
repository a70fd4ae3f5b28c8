-- sql/roles.sql: least-privilege roles for partitionq on PgQ.
--
-- Four group roles (NOLOGIN); give each person or service a login role that
-- is a member of one of them (see docs/security.md):
--
--   partitionq_producer  sends events                      (Client.Send*, partitionq send)
--   partitionq_worker    consumes the queue's groups        (Worker, partitionq work without --ticker)
--   partitionq_operator  skip, retry now, quarantine, replay, and everything the viewer sees
--   partitionq_viewer    reads status, blocked keys, dead letters and the audit trail
--                        (partitionq status/blocked/preview/dlq list/audit, the console)
--
-- Setup (partitionq setup / Client.Setup: create_queue, register_consumer, the
-- partitionq schema), purging dead letters, and the ticker (pgqd, partitionq
-- tick, or a worker with RunTicker) stay with the owner: a role that owns the
-- partitionq schema and is a member of pgq_admin (or a superuser).
--
-- Run it as that owner in each database, after the first partitionq setup
-- (it grants on the tables that setup creates), e.g.
--   psql "$DATABASE_URL" -v ON_ERROR_STOP=1 -f sql/roles.sql
-- It is idempotent. Roles are cluster-wide; the grants are per database.
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
-- What partitionq needs beyond PgQ's grants, and why (the smallest additions):
--   * pgq.event_retry_raw (pgq_admin only): the worker parks a blocked key's
--     events in the retry queue without counting them as failures.
--   * pgq.retry_queue (pgq_admin only): blocked keys are read from it
--     (viewer: select); the worker and the operator delete resolved rows and
--     lock the head row (select ... for update needs UPDATE on a column, so
--     update is granted on ev_retry only, which the worker also writes);
--     the operator's `lock table ... in share update exclusive mode`
--     (serializing with the engine's retry mover) is allowed by DELETE.
--   * partitionq.*: failure records (worker, operator), dead letters
--     (worker and operator insert; operator marks replays), audit (operator).

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

-- ---------------------------------------------------------------- producer
-- Send only: pgq.insert_event through pgq_writer. Nothing in the partitionq
-- schema, no retry queue, no consuming.
grant pgq_writer to partitionq_producer;

-- ------------------------------------------------------------------ viewer
-- Read-only: status, blocked keys and their waiting events, dead letters,
-- audit. (Payloads of blocked and dead events are visible: the console
-- shows them.)
grant usage on schema pgq to partitionq_viewer;
grant select on pgq.retry_queue to partitionq_viewer;
grant usage on schema partitionq to partitionq_viewer;
grant select on partitionq.schema_version, partitionq.failure, partitionq.dead_letter, partitionq.audit,
                partitionq.worker, partitionq.slot, partitionq.slot_progress to partitionq_viewer;

-- ------------------------------------------------------------------ worker
-- Consume: batches through pgq_reader; park, drain and resolve a blocked
-- key's events in the retry queue; record failures and dead letters.
grant pgq_reader to partitionq_worker;
grant execute on function pgq.event_retry_raw(text, text, timestamptz, bigint, timestamptz, integer,
                                               text, text, text, text, text, text) to partitionq_worker;
grant select, delete on pgq.retry_queue to partitionq_worker;
grant update (ev_retry) on pgq.retry_queue to partitionq_worker;
grant usage on schema partitionq to partitionq_worker;
grant select on partitionq.schema_version to partitionq_worker;
grant select, insert, update, delete on partitionq.failure to partitionq_worker;
-- Ownership: the worker's lease row, the slots' owners and epochs, the
-- progress inside open batches, exactly-once completions.
grant select, insert, update, delete on partitionq.worker to partitionq_worker;
grant usage on sequence partitionq.worker_id_seq to partitionq_worker;
grant select, insert, update on partitionq.slot to partitionq_worker;
grant select, insert, update on partitionq.slot_progress to partitionq_worker;
grant select, insert, delete on partitionq.slot_done to partitionq_worker;
grant execute on function partitionq.check_owner(text, text, int, bigint),
                          partitionq.record_done(text, text, int, bigint, bigint, bigint) to partitionq_worker;
grant select, insert on partitionq.dead_letter to partitionq_worker;
grant usage on sequence partitionq.dead_letter_id_seq to partitionq_worker;

-- ---------------------------------------------------------------- operator
-- Everything the viewer reads, plus: skip and quarantine (delete parked
-- rows, write dead letters), retry now (bring a failure's next attempt
-- forward), replay (send a dead letter again: pgq_writer, and mark it
-- replayed), each with its audit entry. Not: purge (delete dead letters for
-- good) stays with the owner; grant delete on partitionq.dead_letter to the
-- operator to allow it.
grant partitionq_viewer to partitionq_operator;
grant pgq_writer to partitionq_operator;
grant delete on pgq.retry_queue to partitionq_operator;
grant update (ev_retry) on pgq.retry_queue to partitionq_operator;
grant update (next_attempt_at), delete on partitionq.failure to partitionq_operator;
grant select, delete on partitionq.slot_done to partitionq_operator;
grant insert, update (replayed_at, replay_ev_id) on partitionq.dead_letter to partitionq_operator;
grant usage on sequence partitionq.dead_letter_id_seq to partitionq_operator;
grant insert on partitionq.audit to partitionq_operator;
grant usage on sequence partitionq.audit_id_seq to partitionq_operator;
