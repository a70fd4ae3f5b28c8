package partitionq

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/partitionq/partitionq/partitionq/internal/db"
	"github.com/partitionq/partitionq/partitionq/internal/runner"
	"github.com/partitionq/partitionq/partitionq/internal/slotstats"
)

// RunHandler handles runs of events: consecutive events of one key, in
// order, at most Limits.MaxRun of them, as many as the worker holds of the
// key when the run starts (a run never waits for more events). A handler
// that writes a run with one statement and one commit pays one round trip
// where a Handler pays one per event. Runs of one key are handed one at a
// time, as a Handler's events are; runs of different keys at once.
//
// Returning nil means every event of the run is done. An error names the
// first event not done: RunFailed(i, err) (a *RunError) says the events
// before evs[i] are done and evs[i] failed with err; any other error is
// the failure of evs[0]. The failed event is handled as a Handler's failed
// event (DeadLetterNow and RetryAfter in err apply to it), and the events
// after it are not done: under PolicyPause they wait behind it, as a
// blocked key's events do; under PolicyRetryLater they come again in the
// next run. A run cut short by a fault (a crash, a lost slot) comes again
// whole, except what the recorded progress says is done: at most the runs
// in flight repeat (docs/guarantees.md).
//
// A blocked key's waiting events, drained once its head succeeded, come one
// at a time, as runs of one. A handler that panics fails evs[0] with the
// panic's text. The context is cancelled when the worker's shutdown
// timeout passes or the handler timeout (which bounds the run's call)
// expires. The handler may keep evs and the events.
type RunHandler interface {
	HandleRun(ctx context.Context, evs []*Event) error
}

// RunHandlerFunc adapts a function to RunHandler.
type RunHandlerFunc func(ctx context.Context, evs []*Event) error

// HandleRun calls f.
func (f RunHandlerFunc) HandleRun(ctx context.Context, evs []*Event) error { return f(ctx, evs) }

// TxRunHandler handles runs of events (as RunHandler) inside a transaction
// that the worker opens on the client's pool, as TxHandler does for one
// event: when HandleRunTx returns nil, the worker checks in the same
// transaction that it still owns the slot and records every event of the
// run as done, then commits: the handler's writes and the run's completion
// commit together or not at all (exactly-once effects in the same
// database).
//
// An error rolls the whole transaction back. When it is RunFailed(i, err)
// with i > 0, the worker then calls HandleRunTx again with evs[:i] in a new
// transaction, so that the events before the failed one are done (their
// writes commit once, with their completion), and evs[i] fails with err
// (DeadLetterNow and RetryAfter apply); the events after it are not done,
// as for RunHandler. The handler must not commit or roll back tx itself.
type TxRunHandler interface {
	HandleRunTx(ctx context.Context, tx pgx.Tx, evs []*Event) error
}

// TxRunHandlerFunc adapts a function to TxRunHandler.
type TxRunHandlerFunc func(ctx context.Context, tx pgx.Tx, evs []*Event) error

// HandleRunTx calls f.
func (f TxRunHandlerFunc) HandleRunTx(ctx context.Context, tx pgx.Tx, evs []*Event) error {
	return f(ctx, tx, evs)
}

// RunError is the error RunFailed returns: a run handler's word that the
// events of its run before Index are done and the event at Index failed
// with Err. A caller's tests can assert on it with errors.As; errors.Unwrap
// gives Err, so DeadLetterNow and RetryAfter inside it are found through it.
type RunError struct {
	Index int   // the first event of the run not done: it failed
	Err   error // its failure
}

// Error says which event of the run failed, and why.
func (e *RunError) Error() string {
	return fmt.Sprintf("event %d of the run: %s", e.Index, errString(e.Err))
}

// Unwrap returns Err.
func (e *RunError) Unwrap() error { return e.Err }

// RunFailed says that a run handler did the events of its run before
// evs[i] and that evs[i] failed with err (wrap err with DeadLetterNow or
// RetryAfter to say more, as a Handler does). An i outside the run counts
// as 0: the run's first event failed, nothing is done.
func RunFailed(i int, err error) error { return &RunError{Index: i, Err: err} }

// runOutcome reads how far a run of n events got from a run handler's
// error: done events, and the failure of the next one.
func runOutcome(err error, n int) (done int, failure error) {
	if err == nil {
		return n, nil
	}
	var re *RunError
	if !errors.As(err, &re) {
		return 0, err
	}
	if re.Index < 0 || re.Index >= n {
		return 0, fmt.Errorf("RunFailed(%d, ...) in a run of %d events: the first event failed: %w", re.Index, n, re.Err)
	}
	return re.Index, re.Err
}

// runResult turns a run handler's outcome into the runner's.
func runResult(done int, failure error) runner.RunResult {
	return runner.RunResult{Done: done, Failed: result(failure)}
}

// events returns the events of a run call.
func (w *Worker) events(c runner.RunCall) []*Event {
	evs := make([]Event, len(c.Events)) // one allocation for the run
	out := make([]*Event, len(c.Events))
	for i := range c.Events {
		ev := &c.Events[i]
		evs[i] = Event{ID: ev.ID, Queue: w.cfg.Queue, Group: w.cfg.Group, Slot: c.Slot, Slots: c.N, Key: ev.Key,
			Type: ev.Type, Payload: []byte(ev.Data), Time: ev.Time, Attempt: c.Attempts[i], Epoch: c.Epoch, batch: c.Batch}
		out[i] = &evs[i]
	}
	return out
}

func (w *Worker) runHandleFunc(h RunHandler) runner.RunHandler {
	return func(ctx context.Context, c runner.RunCall) runner.RunResult {
		evs := w.events(c)
		return runResult(runOutcome(h.HandleRun(ctx, evs), len(evs)))
	}
}

// txRunHandleFunc runs a TxRunHandler: the run and its completion in one
// transaction; a run that fails at i > 0 is rolled back and its events
// before i run again in a transaction of their own.
func (w *Worker) txRunHandleFunc(h TxRunHandler) runner.RunHandler {
	return func(ctx context.Context, c runner.RunCall) runner.RunResult {
		evs := w.events(c)
		var failure error // the failure of evs[len(evs)] once evs is cut to the events before it
		for {
			var herr error
			err := pgx.BeginFunc(ctx, w.c.pool, func(tx pgx.Tx) error {
				if herr = h.HandleRunTx(ctx, tx, evs); herr != nil {
					return herr
				}
				return recordRunDone(ctx, tx, evs)
			})
			if herr == nil && err != nil {
				return runResult(0, err) // not committed (a lost slot, a fault): the run's first event failed
			}
			if herr == nil {
				return runResult(len(evs), failure)
			}
			done, f := runOutcome(herr, len(evs))
			if done == 0 {
				return runResult(0, f)
			}
			evs, failure = evs[:done], f
		}
	}
}

// recordRunDone records every event of a run (of one slot, epoch and
// batch) as done, in the handler's transaction, in one statement.
func recordRunDone(ctx context.Context, tx pgx.Tx, evs []*Event) error {
	ids := make([]int64, len(evs))
	for i, ev := range evs {
		ids[i] = ev.ID
	}
	ev := evs[0]
	err := slotstats.RecordDoneAll(ctx, tx, ev.Queue, ev.Group, ev.Slots, ev.Slot, ev.Epoch, ev.batch, ids)
	if db.Code(err) == codeNotOwner {
		return fmt.Errorf("%w (slot %d, epoch %d)", ErrNotOwner, ev.Slot, ev.Epoch)
	}
	return err
}
