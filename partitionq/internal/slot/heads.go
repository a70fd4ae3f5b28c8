package slot

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/partitionq/partitionq/partitionq/internal/engine"
	"github.com/partitionq/partitionq/partitionq/internal/store"
)

// headLoop drains blocked keys under the pause policy. A key is blocked
// exactly when the slot's subscription has events of it in the engine's
// retry queue; they are parked there at a time the engine's mover never
// reaches, so only this loop (and operator actions) take them out, one key
// at a time, in ev_id order. The loop wakes when a batch parks a new head,
// when a drain ends, and at the earliest next attempt (at least every
// HeadScanInterval, so operator actions are seen).
func (r *runner) headLoop(ctx context.Context) {
	next := time.Now()
	for ctx.Err() == nil {
		if d := time.Until(next); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
			case <-r.wake:
			case <-t.C:
			}
			t.Stop()
		}
		if ctx.Err() != nil {
			return
		}
		next = r.scanHeads(ctx)
	}
}

// scanHeads starts a drain for every blocked key whose head is due and
// returns when to scan again.
func (r *runner) scanHeads(ctx context.Context) time.Time {
	next := time.Now().Add(r.cfg.HeadScanInterval)
	has, err := r.cfg.Eng.HasRetry(ctx, r.cfg.Pool, r.cfg.SubID)
	if err != nil || !has {
		if err != nil && ctx.Err() == nil {
			r.log.Warn("partitionq: reading blocked keys failed", slog.Any("error", err))
		}
		return next
	}
	heads, err := r.cfg.Eng.RetryHeads(ctx, r.cfg.Pool, r.cfg.SubID, nil)
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn("partitionq: reading blocked keys failed", slog.Any("error", err))
		}
		return next
	}
	ids := make([]int64, len(heads))
	for i, h := range heads {
		ids[i] = h.ID
	}
	fails, err := store.Failures(ctx, r.cfg.Pool, r.cfg.Queue, r.cfg.Consumer, ids)
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn("partitionq: reading failures failed", slog.Any("error", err))
		}
		return next
	}
	for _, h := range heads {
		if h.After.Before(engine.Far) {
			// A timed retry (left by the skip policy): the engine's mover
			// re-delivers it; it is not parked, so it is not drained here.
			continue
		}
		if f, ok := fails[h.ID]; ok && !f.Due {
			if at := time.Now().Add(f.Wait); at.Before(next) {
				next = at
			}
			continue
		}
		r.startDrain(ctx, h.Key, h.ID)
	}
	return next
}

// startDrain drains key from headID on, unless a drain of key is running.
func (r *runner) startDrain(ctx context.Context, key string, headID int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.draining[key] {
		return
	}
	r.draining[key] = true
	r.drains.Add(1)
	go func() {
		defer r.drains.Done()
		select { // bound the connections drains hold
		case r.drainSem <- struct{}{}:
			defer func() { <-r.drainSem }()
		case <-ctx.Done():
			r.mu.Lock()
			delete(r.draining, key)
			r.mu.Unlock()
			return
		}
		defer r.signal()
		defer func() {
			r.mu.Lock()
			delete(r.draining, key)
			r.mu.Unlock()
		}()
		for id := headID; id != 0 && ctx.Err() == nil; {
			next, err := r.drainOne(ctx, key, id)
			if err != nil {
				if ctx.Err() == nil && r.hard.Err() == nil {
					r.log.Warn("partitionq: draining a blocked key failed", slog.String("key", key), slog.Any("error", err))
				}
				return
			}
			id = next
		}
	}()
}

// drainOne handles the parked head headID of key under its row lock, so an
// operator's skip of the same event waits for the outcome and never both
// happen. It returns the key's next head when that is due now, else 0.
func (r *runner) drainOne(ctx context.Context, key string, headID int64) (int64, error) {
	db := r.hard
	tx, err := r.cfg.Pool.Begin(db)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // no-op after commit

	ev, ok, err := r.cfg.Eng.LockRetry(db, tx, r.cfg.SubID, headID, false)
	if errors.Is(err, engine.ErrLocked) || (err == nil && !ok) {
		return 0, nil // being handled by an operator action, or already resolved
	}
	if err != nil {
		return 0, err
	}
	if older, err := r.cfg.Eng.HasOlderRetry(db, tx, r.cfg.SubID, key, headID); err != nil || older {
		return 0, err // not the head: the next scan finds the real one
	}
	attempt := int(ev.Retry) + 1
	res := r.call(ev, attempt)
	switch {
	case res.Err == nil:
		if err := r.resolve(db, tx, ev.ID, nil); err != nil {
			return 0, err
		}
	case r.hard.Err() != nil:
		return 0, nil // shutdown: the rollback leaves the head as it was
	case r.exhausted(res, attempt):
		dl := r.deadLetter(ev, attempt, res)
		if err := r.resolve(db, tx, ev.ID, &dl); err != nil {
			return 0, err
		}
		r.cfg.Stats.DeadLettered.Add(1)
	default:
		if err := r.cfg.Eng.SetRetryCount(db, tx, r.cfg.SubID, ev.ID, int32(attempt)); err != nil {
			return 0, err
		}
		f := store.Failure{EvID: ev.ID, Attempts: attempt, LastError: errText(res.Err)}
		if err := store.PutFailure(db, tx, r.cfg.Queue, r.cfg.Consumer, f, r.retryDelay(res, attempt)); err != nil {
			return 0, err
		}
		return 0, tx.Commit(db)
	}
	if ctx.Err() != nil {
		return 0, nil
	}
	// The key's next parked event is its new head: due now unless it has
	// failed before (then its own schedule applies).
	nextEv, ok, err := r.cfg.Eng.NextRetry(ctx, r.cfg.Pool, r.cfg.SubID, key, ev.ID)
	if err != nil || !ok {
		return 0, err
	}
	fails, err := store.Failures(ctx, r.cfg.Pool, r.cfg.Queue, r.cfg.Consumer, []int64{nextEv.ID})
	if err != nil {
		return 0, err
	}
	if f, ok := fails[nextEv.ID]; ok && !f.Due {
		return 0, nil
	}
	return nextEv.ID, nil
}

// resolve removes a handled (or dead-lettered, when dl is set) head from
// the retry queue in tx and commits.
func (r *runner) resolve(ctx context.Context, tx pgx.Tx, evID int64, dl *store.DeadLetter) error {
	if _, err := r.cfg.Eng.DeleteRetry(ctx, tx, r.cfg.SubID, evID); err != nil {
		return err
	}
	if err := store.DeleteFailure(ctx, tx, r.cfg.Queue, r.cfg.Consumer, evID); err != nil {
		return err
	}
	if dl != nil {
		if err := store.AddDeadLetters(ctx, tx, []store.DeadLetter{*dl}); err != nil {
			return err
		}
	}
	return tx.Commit(ctx)
}
