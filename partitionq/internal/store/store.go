// Package store owns partitionq's own schema "partitionq": its tables, as
// numbered migrations (migration/*.sql), and its functions, one file each
// (function/*.sql), both applied by migrate.go (sql/schema.sql shows the
// result); and the dead letters and the audit trail of operator actions,
// which every role but the schema owner writes only through the record
// functions of records.go. Failure records of parked heads are package
// parked's, the ownership and progress tables packages lease and runner's.
// None of it decides whether a key is blocked: that is derived from the
// engine's retry queue.
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

	"github.com/partitionq/partitionq/partitionq/internal/db"
)

// DB is a pool, a connection or a transaction (db.DB).
type DB = db.DB

// Installed reports whether the partitionq schema exists.
func Installed(ctx context.Context, db DB) (bool, error) {
	var ok bool
	err := db.QueryRow(ctx, `select to_regclass('partitionq.dead_letter') is not null`).Scan(&ok)
	return ok, err
}

// DropGroupState removes the generations, ownership and progress rows of a
// dropped group (its dead letters and audit entries stay).
func DropGroupState(ctx context.Context, db DB, queue, group string) error {
	for _, t := range []string{"generation", "slot", "slot_progress", "slot_done", "slot_rate"} {
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

// CountAllDeadLetters counts, for every group of queue (of every queue
// when it is empty) with dead letters, those not yet replayed: one query.
func CountAllDeadLetters(ctx context.Context, db DB, queue string) ([]GroupCount, error) {
	rows, err := db.Query(ctx, `select queue, grp, count(*) from partitionq.dead_letter
		where replayed_at is null and ($1::text = '' or queue = $1) group by 1, 2`, queue)
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
