// Package store owns partitionq's own schema "partitionq" (its tables,
// functions and their migration) and keeps the dead letters and the audit
// trail of operator actions, which every role but the schema owner writes
// only through the record functions of records.go. Failure records of parked heads are package parked's,
// the ownership and progress tables packages lease and runner's. None of it
// decides whether a key is blocked: that is derived from the engine's retry
// queue.
//
// The functions are safe for concurrent use; each runs on the DB it is given.
package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/partitionq/partitionq/internal/pglock"
	"github.com/partitionq/partitionq/partitionq/internal/db"
	"github.com/partitionq/partitionq/partitionq/internal/engine"
)

// DB is a pool, a connection or a transaction (db.DB).
type DB = db.DB

// Version is the schema version this package writes.
const Version = 4 // 2: failure.flagged_at; 3: worker leases, slot ownership and progress, ticker turns; 4: records through functions only, slot rates, last finish

const ddl = `
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
` + engine.RecordsDDL + recordsDDL

// Migrate creates the schema and tables when missing. Concurrent callers
// are serialized with a transaction-level advisory lock.
func Migrate(ctx context.Context, db db.TxStarter) error {
	// Already at this version: no DDL, so roles without CREATE (operators,
	// workers) can call it.
	var exists bool
	if err := db.QueryRow(ctx, `select to_regclass('partitionq.schema_version') is not null`).Scan(&exists); err != nil {
		return fmt.Errorf("read partitionq schema version: %w", err)
	}
	if exists {
		var current int
		if err := db.QueryRow(ctx, `select coalesce(max(version), 0) from partitionq.schema_version`).Scan(&current); err != nil {
			return fmt.Errorf("read partitionq schema version: %w", err)
		}
		if current >= Version {
			return nil
		}
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // no-op after commit
	if err := pglock.Xact(ctx, tx, pglock.Migrate); err != nil {
		return err
	}
	// The version found under the lock (another caller may have migrated).
	var from int
	if err := tx.QueryRow(ctx, `select to_regclass('partitionq.schema_version') is not null`).Scan(&exists); err != nil {
		return fmt.Errorf("read partitionq schema version: %w", err)
	}
	if exists {
		if err := tx.QueryRow(ctx, `select coalesce(max(version), 0) from partitionq.schema_version`).Scan(&from); err != nil {
			return fmt.Errorf("read partitionq schema version: %w", err)
		}
	}
	if from >= Version {
		return tx.Commit(ctx)
	}
	if _, err := tx.Exec(ctx, ddl); err != nil {
		return fmt.Errorf("create schema partitionq: %w", err)
	}
	if from > 0 && from < 4 {
		// Records through functions only: the grants move to them.
		if _, err := tx.Exec(ctx, moveGrants); err != nil {
			return fmt.Errorf("migrate partitionq schema from version %d: %w", from, err)
		}
	}
	if _, err := tx.Exec(ctx, `delete from partitionq.schema_version`); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `insert into partitionq.schema_version values ($1)`, Version); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// Installed reports whether the partitionq schema exists.
func Installed(ctx context.Context, db DB) (bool, error) {
	var ok bool
	err := db.QueryRow(ctx, `select to_regclass('partitionq.dead_letter') is not null`).Scan(&ok)
	return ok, err
}

// AddSlots records the ownership rows of a group's n slots (free).
func AddSlots(ctx context.Context, db DB, queue, group string, n int) error {
	_, err := db.Exec(ctx, `insert into partitionq.slot (queue, grp, slot, n) select $1, $2, s, $3 from generate_series(0, $3 - 1) s
		on conflict (queue, grp, slot) do update set n = excluded.n where partitionq.slot.n <> excluded.n`, queue, group, n)
	return err
}

// DropGroupState removes the ownership and progress rows of a dropped
// group (its dead letters and audit entries stay).
func DropGroupState(ctx context.Context, db DB, queue, group string) error {
	for _, t := range []string{"slot", "slot_progress", "slot_done", "slot_rate"} {
		if _, err := db.Exec(ctx, `delete from partitionq.`+t+` where queue = $1 and grp = $2`, queue, group); err != nil {
			return err
		}
	}
	return nil
}

// ------------------------------------------------------------ dead letters

// DeadLetter is an event that will not be handled again unless replayed.
type DeadLetter struct {
	ID         int64
	Queue      string
	Group      string
	Slot       int
	EvID       int64
	EvTime     time.Time
	Type       string
	Data       string
	Key        string
	Attempts   int
	LastError  string
	Reason     string
	Actor      string
	DBRole     string
	DeadAt     time.Time
	ReplayedAt *time.Time
	ReplayEvID *int64
}

const dlCols = `id, queue, grp, slot, ev_id, ev_time, ev_type, ev_data, key, attempts, last_error, reason, actor, db_role, dead_at, replayed_at, replay_ev_id`

func scanDL(r pgx.CollectableRow) (DeadLetter, error) {
	var d DeadLetter
	err := r.Scan(&d.ID, &d.Queue, &d.Group, &d.Slot, &d.EvID, &d.EvTime, &d.Type, &d.Data, &d.Key, &d.Attempts,
		&d.LastError, &d.Reason, &d.Actor, &d.DBRole, &d.DeadAt, &d.ReplayedAt, &d.ReplayEvID)
	return d, err
}

// DeadLetterFilter selects dead letters of one group.
type DeadLetterFilter struct {
	Queue, Group string
	Key          *string
	AfterID      int64 // only ids greater than this (paging)
	Limit        int
	Pending      bool // only those not replayed
	Newest       bool // newest first; AfterID bounds from above (0: none)
	// ByEvent orders by ev_id (the original event order) instead of id.
	ByEvent bool

	Type       *string   // only this event type
	ErrorLike  string    // only those whose last error contains this, ignoring case
	Reason     string    // only those whose reason starts with this
	DeadAfter  time.Time // only those dead at or after this time, when not zero
	DeadBefore time.Time // only those dead before this time, when not zero
	IDs        []int64   // only these ids, when not nil
}

// where returns the filter's condition and its arguments (paging and order
// excluded).
func (f DeadLetterFilter) where() (string, []any) {
	args := []any{f.Queue, f.Group}
	cond := "queue = $1 and grp = $2"
	add := func(sql string, v any) {
		args = append(args, v)
		cond += " and " + strings.ReplaceAll(sql, "$?", "$"+strconv.Itoa(len(args)))
	}
	if f.Key != nil {
		add("key = $?", *f.Key)
	}
	if f.Pending {
		cond += " and replayed_at is null"
	}
	if f.Type != nil {
		add("ev_type = $?", *f.Type)
	}
	if f.ErrorLike != "" {
		add("strpos(lower(last_error), lower($?)) > 0", f.ErrorLike)
	}
	if f.Reason != "" {
		add("starts_with(reason, $?)", f.Reason)
	}
	if !f.DeadAfter.IsZero() {
		add("dead_at >= $?", f.DeadAfter)
	}
	if !f.DeadBefore.IsZero() {
		add("dead_at < $?", f.DeadBefore)
	}
	if f.IDs != nil {
		add("id = any($?::int8[])", f.IDs)
	}
	return cond, args
}

// ListDeadLetters lists the dead letters f selects, in id order (ev_id
// order with ByEvent), at most f.Limit (all when it is 0).
func ListDeadLetters(ctx context.Context, db DB, f DeadLetterFilter) ([]DeadLetter, error) {
	cond, args := f.where()
	col := "id"
	if f.ByEvent {
		col = "ev_id"
	}
	order := " order by " + col
	if f.AfterID != 0 || f.Newest {
		args = append(args, f.AfterID)
		n := "$" + strconv.Itoa(len(args))
		if f.Newest {
			cond += " and (" + n + " = 0 or id < " + n + ")"
		} else {
			cond += " and id > " + n
		}
	}
	if f.Newest {
		order += " desc"
	}
	sql := `select ` + dlCols + ` from partitionq.dead_letter where ` + cond + order
	if f.Limit > 0 {
		args = append(args, f.Limit)
		sql += " limit $" + strconv.Itoa(len(args))
	}
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	return pgx.CollectRows(rows, scanDL)
}

// CountMatching counts the dead letters f selects (paging, order and
// limit ignored).
func CountMatching(ctx context.Context, db DB, f DeadLetterFilter) (int64, error) {
	cond, args := f.where()
	var n int64
	if err := db.QueryRow(ctx, `select count(*) from partitionq.dead_letter where `+cond, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("count dead letters: %w", err)
	}
	return n, nil
}

// GroupCount is the number of dead letters of one group not yet replayed.
type GroupCount struct {
	Queue, Group string
	Pending      int64
}

// CountAllDeadLetters counts, for every group with dead letters, those not
// yet replayed: one query.
func CountAllDeadLetters(ctx context.Context, db DB) ([]GroupCount, error) {
	rows, err := db.Query(ctx, `select queue, grp, count(*) from partitionq.dead_letter where replayed_at is null group by 1, 2`)
	if err != nil {
		return nil, fmt.Errorf("count dead letters: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (GroupCount, error) {
		var c GroupCount
		err := r.Scan(&c.Queue, &c.Group, &c.Pending)
		return c, err
	})
}

// ErrNoDeadLetter reports that no dead letter has the given id in the group.
var ErrNoDeadLetter = errors.New("no such dead letter")

// GetDeadLetter returns one dead letter.
func GetDeadLetter(ctx context.Context, db DB, queue, group string, id int64) (DeadLetter, error) {
	rows, err := db.Query(ctx, `select `+dlCols+` from partitionq.dead_letter where queue = $1 and grp = $2 and id = $3`, queue, group, id)
	if err != nil {
		return DeadLetter{}, err
	}
	d, err := pgx.CollectExactlyOneRow(rows, scanDL)
	if errors.Is(err, pgx.ErrNoRows) {
		return DeadLetter{}, ErrNoDeadLetter
	}
	return d, err
}

// CountDeadLetters counts the dead letters of a group not yet replayed.
func CountDeadLetters(ctx context.Context, db DB, queue, group string) (int64, error) {
	var n int64
	err := db.QueryRow(ctx, `select count(*) from partitionq.dead_letter where queue = $1 and grp = $2 and replayed_at is null`, queue, group).Scan(&n)
	return n, err
}

// HasRecords reports whether a group has dead letters or audit entries:
// a group dropped from the engine keeps them (see partitionq.DropGroup).
func HasRecords(ctx context.Context, db DB, queue, group string) (bool, error) {
	var ok bool
	err := db.QueryRow(ctx, `select exists (select 1 from partitionq.dead_letter where queue = $1 and grp = $2)
		or exists (select 1 from partitionq.audit where queue = $1 and grp = $2)`, queue, group).Scan(&ok)
	return ok, err
}

// ------------------------------------------------------------------ audit

// AuditEntry is one operator action.
type AuditEntry struct {
	ID      int64
	At      time.Time
	DBRole  string
	Actor   string
	Action  string
	Queue   string
	Group   string
	Key     *string
	EvID    *int64
	Reason  string
	Outcome string
}

// ListAudit returns the newest audit entries of a group, newest first.
func ListAudit(ctx context.Context, db DB, queue, group string, limit int) ([]AuditEntry, error) {
	rows, err := db.Query(ctx, `select id, at, db_role, actor, action, queue, grp, key, ev_id, reason, outcome
		from partitionq.audit where queue = $1 and grp = $2 order by id desc limit $3`, queue, group, limit)
	if err != nil {
		return nil, fmt.Errorf("list audit: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (AuditEntry, error) {
		var a AuditEntry
		err := r.Scan(&a.ID, &a.At, &a.DBRole, &a.Actor, &a.Action, &a.Queue, &a.Group, &a.Key, &a.EvID, &a.Reason, &a.Outcome)
		return a, err
	})
}
