package store

import (
	"context"
	"fmt"
	"time"
)

// The record functions (docs/security.md, "Records nobody can forge"). The
// dead letters and the audit trail are written only through these SECURITY
// DEFINER functions of partitionq's schema, which run as the schema owner,
// pin their search_path, record session_user themselves (never a role the
// caller names) and refuse what is not true:
//
//   - give_up (the worker): dead letters of events that are the slot's to
//     give up, in its open batch or in its retry queue, for a worker's
//     reason (handler, max_attempts, max_blocked), actor "worker";
//   - set_aside (the operator): skip and quarantine dead letters of events
//     parked for the slot, and the action's audit entry;
//   - record_replay (the operator): marks dead letters replayed, only with
//     the replay's event inserted into the queue by the same transaction,
//     with the dead letter's key, type and payload; one audit entry;
//   - purge_dead_letters (the owner, or a role granted it): deletes dead
//     letters by ids or age and writes one audit entry with the count;
//   - record_action (the operator): the audit entry of an action that
//     writes no record (retry now, an action that found its head already
//     resolved, a replay already done, a group dropped once its slots are
//     gone).
//
// Their content comes from the engine's rows (engine.RecordsDDL), not from
// the caller. No role but the owner is granted INSERT, UPDATE or DELETE on
// partitionq.dead_letter or partitionq.audit.
const recordsDDL = `
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
`

// moveGrants is the step of the migration to version 4 for a schema that
// existed before: every role but the owner loses INSERT, UPDATE, DELETE and
// TRUNCATE on the dead letters and the audit trail (and their sequences),
// and gets the functions that replace them: a role that could write the
// audit trail (an operator) set_aside, record_replay and record_action; one
// that could write dead letters but not the audit trail (a worker) give_up;
// one that could delete dead letters purge_dead_letters. SELECT stays.
const moveGrants = `
do $move$
declare
    r record;
begin
    for r in
        with g as (
            select a.grantee, c.relname, a.privilege_type
              from pg_class c cross join lateral aclexplode(c.relacl) a
             where c.relnamespace = 'partitionq'::regnamespace and c.relname in ('dead_letter', 'audit') and a.grantee <> c.relowner
            union
            select a.grantee, c.relname, a.privilege_type
              from pg_class c join pg_attribute t on t.attrelid = c.oid cross join lateral aclexplode(t.attacl) a
             where c.relnamespace = 'partitionq'::regnamespace and c.relname in ('dead_letter', 'audit') and a.grantee <> c.relowner)
        select case when grantee = 0 then 'public' else quote_ident(pg_get_userbyid(grantee)) end as role,
               bool_or(relname = 'audit' and privilege_type = 'INSERT') as audits,
               bool_or(relname = 'dead_letter' and privilege_type = 'INSERT') as dead_letters,
               bool_or(relname = 'dead_letter' and privilege_type = 'DELETE') as purges,
               bool_or(privilege_type not in ('SELECT', 'REFERENCES')) as writes
          from g group by grantee
    loop
        continue when not r.writes;
        if r.audits then
            execute 'grant execute on function partitionq.set_aside(text, text, text, int, text, text, bigint[], text, text),
                     partitionq.record_replay(text, text, text, bigint[], bigint[], text, text, text),
                     partitionq.record_action(text, text, text, text, text, bigint, text, text) to ' || r.role;
        elsif r.dead_letters then
            execute 'grant execute on function partitionq.give_up(text, text, text, int, text, bigint[], int[], text[], text[]) to ' || r.role;
        end if;
        if r.purges then
            execute 'grant execute on function partitionq.purge_dead_letters(text, text, bigint[], timestamptz, text, text, text) to ' || r.role;
        end if;
        execute 'revoke insert, update, delete, truncate, trigger on partitionq.dead_letter, partitionq.audit from ' || r.role;
        execute 'revoke usage, update on sequence partitionq.dead_letter_id_seq, partitionq.audit_id_seq from ' || r.role;
    end loop;
end
$move$;
`

// SQLSTATEs the record functions raise.
const (
	// CodeNotTrue: the record asked for is not true of the engine's state
	// (an event not the caller's to give up, a replay not sent, an audit
	// entry of an action another function records).
	CodeNotTrue = "PQ002"
	// CodeNoDeadLetter: no such dead letter in the group.
	CodeNoDeadLetter = "PQ003"
	// CodeReplayedAlready: the dead letter was replayed before (by a
	// concurrent replay that committed first).
	CodeReplayedAlready = "PQ004"
)

// GiveUp stores the dead letters of a worker (reasons handler,
// max_attempts, max_blocked) of events of one slot, through
// partitionq.give_up: each event must be in the slot's open batch or in
// its retry queue (engine schema engineSchema, slot consumer consumer);
// their content is the engine's. An event that is already a dead letter
// of the group is left as it is (a batch replayed after a crash gives the
// same events up again). Only EvID, Attempts, LastError and Reason of dls
// are sent.
func GiveUp(ctx context.Context, db DB, engineSchema, queue, group string, slot int, consumer string, dls []DeadLetter) error {
	if len(dls) == 0 {
		return nil
	}
	n := len(dls)
	ids, attempts := make([]int64, n), make([]int32, n)
	errs, reasons := make([]string, n), make([]string, n)
	for i, d := range dls {
		ids[i], attempts[i], errs[i], reasons[i] = d.EvID, int32(d.Attempts), d.LastError, d.Reason
	}
	_, err := db.Exec(ctx, `select partitionq.give_up($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
		engineSchema, queue, group, slot, consumer, ids, attempts, errs, reasons)
	if err != nil {
		return fmt.Errorf("store %d dead letters: %w", n, err)
	}
	return nil
}

// SetAside stores the dead letters of an operator's skip or quarantine
// (action "skip" or "quarantine") of events parked for one slot, with the
// action's audit entry, through partitionq.set_aside; it returns how many
// dead letters it wrote.
func SetAside(ctx context.Context, db DB, engineSchema, queue, group string, slot int, consumer, action string,
	ids []int64, reason, actor string) (int, error) {
	var n int
	err := db.QueryRow(ctx, `select partitionq.set_aside($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
		engineSchema, queue, group, slot, consumer, action, ids, reason, actor).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("%s %d events: %w", action, len(ids), err)
	}
	return n, nil
}

// RecordReplay marks dead letters ids[i] replayed as events evIDs[i], which
// the transaction db runs in sent, and audits it (one entry, with note in
// parentheses when not empty), through partitionq.record_replay; it
// returns the audit entry's id.
func RecordReplay(ctx context.Context, db DB, engineSchema, queue, group string, ids, evIDs []int64, reason, actor, note string) (int64, error) {
	if ids == nil {
		ids, evIDs = []int64{}, []int64{}
	}
	var n int
	var auditID int64
	if err := db.QueryRow(ctx, `select * from partitionq.record_replay($1, $2, $3, $4, $5, $6, $7, $8)`,
		engineSchema, queue, group, ids, evIDs, reason, actor, nullIfEmpty(note)).Scan(&n, &auditID); err != nil {
		return 0, fmt.Errorf("record replay of %d dead letters: %w", len(ids), err)
	}
	return auditID, nil
}

func nullIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// PurgeDeadLetters deletes the dead letters of a group (only the given ids
// when ids is not nil; only those dead before `before` when it is not zero),
// writes one audit entry with the count (and note in parentheses when not
// empty), and returns the count and the entry's id, through
// partitionq.purge_dead_letters.
func PurgeDeadLetters(ctx context.Context, db DB, queue, group string, ids []int64, before time.Time, reason, actor, note string) (n, auditID int64, err error) {
	var b *time.Time
	if !before.IsZero() {
		b = &before
	}
	if err := db.QueryRow(ctx, `select * from partitionq.purge_dead_letters($1, $2, $3, $4, $5, $6, $7)`,
		queue, group, ids, b, reason, actor, nullIfEmpty(note)).Scan(&n, &auditID); err != nil {
		return 0, 0, fmt.Errorf("purge dead letters: %w", err)
	}
	return n, auditID, nil
}

// Audit records an operator action that writes no record of its own (retry
// now, an action whose head was already resolved, a replay already done),
// through partitionq.record_action, under session_user.
func Audit(ctx context.Context, db DB, a AuditEntry) error {
	if _, err := db.Exec(ctx, `select partitionq.record_action($1, $2, $3, $4, $5, $6, $7, $8)`,
		a.Actor, a.Action, a.Queue, a.Group, a.Key, a.EvID, a.Reason, a.Outcome); err != nil {
		return fmt.Errorf("record audit entry: %w", err)
	}
	return nil
}
