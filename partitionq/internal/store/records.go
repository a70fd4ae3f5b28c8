package store

import (
	"context"
	"fmt"
)

// The record functions (docs/security.md, "Records nobody can forge"; each
// is function/NAME.sql).
// The dead letters and the audit trail are written only through these
// SECURITY DEFINER functions of partitionq's schema, which run as the schema
// owner, pin their search_path, record session_user themselves (never a role the
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
// Their content comes from the engine's rows (the engine-facing helpers
// engine_events and engine_own_event), not from the caller. No role but the
// owner is granted INSERT, UPDATE or DELETE on partitionq.dead_letter or
// partitionq.audit.

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
// partitionq.give_up: the slot must be owned at epoch (else PQ001, as a
// zombie's finish), and each event must be in the slot's open batch or in
// its retry queue (engine schema engineSchema, slot consumer consumer);
// their content is the engine's. An event that is already a dead letter
// of the group is left as it is (a batch replayed after a crash gives the
// same events up again). Only EvID, Attempts, LastError and Reason of dls
// are sent.
func GiveUp(ctx context.Context, db DB, engineSchema, queue, group string, slot int, epoch int64, consumer string, dls []DeadLetter) error {
	if len(dls) == 0 {
		return nil
	}
	n := len(dls)
	ids, attempts := make([]int64, n), make([]int32, n)
	errs, reasons := make([]string, n), make([]string, n)
	for i, d := range dls {
		ids[i], attempts[i], errs[i], reasons[i] = d.EvID, int32(d.Attempts), d.LastError, d.Reason
	}
	_, err := db.Exec(ctx, `select partitionq.give_up($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
		engineSchema, queue, group, slot, epoch, consumer, ids, attempts, errs, reasons)
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

// PurgeDeadLetters deletes the given dead letters of a group, writes one
// audit entry with the count (and note in parentheses when not empty), and
// returns the count and the entry's id, through
// partitionq.purge_dead_letters. No ids (nil too) deletes nothing: the SQL
// function reads a NULL array as the whole group, which this never sends.
func PurgeDeadLetters(ctx context.Context, db DB, queue, group string, ids []int64, reason, actor, note string) (n, auditID int64, err error) {
	if ids == nil {
		ids = []int64{}
	}
	if err := db.QueryRow(ctx, `select * from partitionq.purge_dead_letters($1, $2, $3, null, $4, $5, $6)`,
		queue, group, ids, reason, actor, nullIfEmpty(note)).Scan(&n, &auditID); err != nil {
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
