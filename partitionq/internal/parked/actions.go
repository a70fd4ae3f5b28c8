package parked

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/partitionq/partitionq/partitionq/internal/db"
	"github.com/partitionq/partitionq/partitionq/internal/engine"
	"github.com/partitionq/partitionq/partitionq/internal/store"
	"github.com/partitionq/partitionq/partitionq/termsafe"
)

// Errors of the operator actions.
var (
	// ErrNotBlocked: the key has no parked events in its slot.
	ErrNotBlocked = errors.New("key is not blocked")
	// ErrHeadBusy: a worker is handling the head right now.
	ErrHeadBusy = errors.New("the blocked head is being handled by a worker right now")
	// ErrNeverFailed: the key's head never failed (the key is draining: its
	// failed head was resolved and its waiting events run next), and the
	// action did not name it; the error is a *NeverFailedError.
	ErrNeverFailed = errors.New("the key is draining: its head event has never failed")
)

// NeverFailedError refuses an action that named no head on a key whose
// head never failed. It matches ErrNeverFailed.
type NeverFailedError struct {
	Key     string
	EventID int64
}

func (e *NeverFailedError) Error() string {
	return fmt.Sprintf("key %s is draining: its head, event %d, has never failed", termsafe.Echo(e.Key), e.EventID)
}

// Is makes errors.Is(err, ErrNeverFailed) true.
func (e *NeverFailedError) Is(target error) bool { return target == ErrNeverFailed }

// NotHeadError: the event an action named is not (or no longer) the key's
// head; nothing was done and nothing recorded. Head is the key's head now
// (nil: nothing of the key is set aside, or not read again).
type NotHeadError struct {
	Key     string
	EventID int64
	Head    *Head
}

func (e *NotHeadError) Error() string {
	return fmt.Sprintf("event %d is not the head of key %s", e.EventID, termsafe.Echo(e.Key))
}

// Kind is an operator action on a key's head.
type Kind string

// The actions.
const (
	Skip       Kind = "skip"       // dead-letter the head; the waiting events run next
	RetryNow   Kind = "retry"      // bring the head's next attempt forward to now
	Quarantine Kind = "quarantine" // dead-letter the head and every waiting event
)

// Outcomes of an action.
const (
	OutcomeSkipped         = "skipped"
	OutcomeAlreadyResolved = "already_resolved"
	OutcomeRetryScheduled  = "retry_scheduled"
	OutcomeQuarantined     = "quarantined"
)

// Action is one operator action.
type Action struct {
	Kind Kind
	Key  string
	// HeadID, when not zero, is the head the operator saw: the action
	// applies only while it is the key's head. It also allows acting on a
	// head that never failed.
	HeadID int64
	Reason string // recorded with the dead letters ("skip: <reason>")
	Actor  string
	// LockTimeout is how long to wait for a worker handling the head; 0
	// waits without limit (PostgreSQL's lock_timeout 0), so callers pass
	// a bound (partitionq passes 5 s).
	LockTimeout time.Duration
}

// ActionResult is what an action did.
type ActionResult struct {
	Outcome string
	EventID int64   // the head acted on (or named)
	Count   int     // events affected
	NextIDs []int64 // skip: the key's waiting events, next to run (up to 10)
}

// Act runs an operator action on the head of a.Key in slot s, in one
// transaction that also runs audit (which records it), except for a skip or
// quarantine done, whose audit entry partitionq.set_aside writes with the
// dead letters. It takes the engine mover's table lock (H4), then the
// head's row lock, waiting up to a.LockTimeout for a worker handling the
// head (then ErrHeadBusy); a head resolved meanwhile is never acted on
// (OutcomeAlreadyResolved, the action does not move on to the next event).
// A head that never failed is acted on only when a.HeadID names it (else
// ErrNeverFailed).
func Act(ctx context.Context, pool db.TxStarter, eng *engine.Engine, s Slot, a Action,
	audit func(ctx context.Context, tx pgx.Tx, res ActionResult) error) (ActionResult, error) {
	res := ActionResult{EventID: a.HeadID}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fmt.Sprintf("set local lock_timeout = %d", a.LockTimeout.Milliseconds())); err != nil {
			return err
		}
		if err := eng.LockRetryQueue(ctx, tx); err != nil {
			return err
		}
		heads, err := Heads(ctx, tx, eng, []Slot{s}, &a.Key)
		if err != nil {
			return err
		}
		if len(heads) == 0 && a.HeadID == 0 {
			return fmt.Errorf("%w: key %s has no unresolved head in its slot", ErrNotBlocked, termsafe.Echo(a.Key))
		}
		if len(heads) == 0 || (a.HeadID != 0 && heads[0].ID != a.HeadID) {
			// Not the head: the caller tells whether that event was
			// resolved (and records it) or never was the head.
			nh := &NotHeadError{Key: a.Key, EventID: a.HeadID}
			if len(heads) > 0 {
				nh.Head = &heads[0]
			}
			return nh
		}
		head := heads[0]
		res.EventID = head.ID
		if head.Parked() {
			// Wait for a worker handling it to finish with it. (A timed
			// engine retry is held by the table lock above.)
			locked, ok, err := eng.LockRetry(ctx, tx, s.SubID, head.ID, true)
			if errors.Is(err, engine.ErrLocked) {
				return fmt.Errorf("%w (key %s, event %d): try again in a moment", ErrHeadBusy, termsafe.Echo(a.Key), head.ID)
			}
			if err != nil {
				return err
			}
			if !ok { // resolved while we waited: never act on the next event
				return &NotHeadError{Key: a.Key, EventID: head.ID}
			}
			// The head as the worker left it: its ev_retry, and its failure
			// record, read after the worker committed.
			head.Event = locked
			fails, err := failures(ctx, tx, s, []int64{head.ID})
			if err != nil {
				return err
			}
			head.Failure = nil
			if f, ok := fails[head.ID]; ok {
				head.Failure = &f
			}
		}
		if head.Draining() && a.HeadID == 0 {
			return &NeverFailedError{Key: a.Key, EventID: head.ID}
		}
		if err := act(ctx, tx, eng, s, a, head, &res); err != nil {
			return err
		}
		if res.Outcome == OutcomeSkipped || res.Outcome == OutcomeQuarantined {
			return nil // partitionq.set_aside wrote the audit entry with the dead letters
		}
		return audit(ctx, tx, res)
	})
	if db.IsLockNotAvailable(err) {
		// Any other lock of the key's rows waited on past the timeout (the
		// mover's table lock, a dead letter a worker is writing): the same
		// as a busy head, nothing was done.
		return ActionResult{}, fmt.Errorf("%w (key %s): a lock it needs is held by a worker or the ticker; try again in a moment", ErrHeadBusy, termsafe.Echo(a.Key))
	}
	if err != nil {
		return ActionResult{}, err
	}
	return res, nil
}

func act(ctx context.Context, tx pgx.Tx, eng *engine.Engine, s Slot, a Action, head Head, res *ActionResult) error {
	switch a.Kind {
	case Skip:
		if err := setAside(ctx, tx, eng, s, a, []int64{head.ID}); err != nil {
			return err
		}
		next, err := eng.RetryEvents(ctx, tx, s.SubID, a.Key, 10)
		if err != nil {
			return err
		}
		for _, ev := range next {
			res.NextIDs = append(res.NextIDs, ev.ID)
		}
		res.Outcome, res.Count = OutcomeSkipped, 1
	case RetryNow:
		if _, err := tx.Exec(ctx, `update partitionq.failure set next_attempt_at = now()
			where queue = $1 and consumer = $2 and ev_id = $3`, s.Queue, s.Consumer, head.ID); err != nil {
			return err
		}
		res.Outcome, res.Count = OutcomeRetryScheduled, 1
	case Quarantine:
		evs, err := eng.LockKeyRetries(ctx, tx, s.SubID, a.Key)
		if err != nil {
			return err
		}
		ids := make([]int64, len(evs))
		for i, ev := range evs {
			ids[i] = ev.ID
		}
		if err := setAside(ctx, tx, eng, s, a, ids); err != nil {
			return err
		}
		res.Outcome, res.Count = OutcomeQuarantined, len(evs)
	default:
		return fmt.Errorf("unknown action %q", a.Kind)
	}
	return nil
}

// setAside dead-letters parked events of the key for an operator's skip or
// quarantine, with the action's audit entry (partitionq.set_aside, which
// reads the events and their failure records itself), then removes them
// from the retry queue.
func setAside(ctx context.Context, tx pgx.Tx, eng *engine.Engine, s Slot, a Action, ids []int64) error {
	if _, err := store.SetAside(ctx, tx, eng.Schema(), s.Queue, s.Group, s.Slot, s.Consumer, string(a.Kind), ids, a.Reason, a.Actor); err != nil {
		return err
	}
	return resolve(ctx, tx, eng, s, ids, nil)
}

// Drop removes everything parked of the slots of a dropped group (their
// engine rows go with the consumers); in tx.
func Drop(ctx context.Context, tx pgx.Tx, slots []Slot) error {
	if len(slots) == 0 {
		return nil
	}
	consumers := make([]string, len(slots))
	for i, s := range slots {
		consumers[i] = s.Consumer
	}
	return Forget(ctx, tx, slots[0].Queue, consumers)
}
