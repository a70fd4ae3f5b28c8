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
// at a time, in ev_id order. The loop wakes when a batch parks events, when
// a drain leaves a head to schedule (it failed, or was not due), and at the
// earliest next attempt (at least every HeadScanInterval, so operator
// actions are seen). A drain that resolved its key wakes nobody: there is
// nothing new to find.
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
		if f, ok := fails[h.ID]; ok && r.cfg.MaxBlocked > 0 && f.Age > r.cfg.MaxBlocked {
			if r.cfg.MaxBlockedDeadLetter {
				r.startDrain(ctx, h.Key, -h.ID) // a negative head: dead-letter it, then drain
				continue
			}
			if f.FlaggedAt == nil {
				if isNew, err := store.Flag(ctx, r.cfg.Pool, r.cfg.Queue, r.cfg.Consumer, h.ID); err == nil && isNew {
					r.log.Warn("partitionq: key blocked longer than MaxBlocked", slog.String("key", h.Key),
						slog.Int64("event_id", h.ID), slog.Duration("blocked", f.Age), slog.Int("attempts", f.Attempts))
				}
			}
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
		rescan := false
		defer func() { // after the key leaves r.draining (below), so the scan may drain it again
			if rescan {
				r.signal()
			}
		}()
		defer func() {
			r.mu.Lock()
			delete(r.draining, key)
			r.mu.Unlock()
		}()
		id := headID
		if id < 0 { // bounded pause: dead-letter the head first
			next, err := r.expire(ctx, key, -id)
			if err != nil {
				if ctx.Err() == nil && r.hard.Err() == nil {
					r.log.Warn("partitionq: dead-lettering a key blocked too long failed", slog.String("key", key), slog.Any("error", err))
				}
				rescan = true
				return
			}
			id = next
		}
		for id != 0 && ctx.Err() == nil {
			next, again, err := r.drainOne(ctx, key, id)
			if err != nil {
				if ctx.Err() == nil && r.hard.Err() == nil {
					r.log.Warn("partitionq: draining a blocked key failed", slog.String("key", key), slog.Any("error", err))
				}
				rescan = true
				return
			}
			id, rescan = next, again
		}
	}()
}

// Drain limits: one transaction handles at most drainRun events of a key,
// or goes on for at most drainRunTime, before it commits what it handled.
const (
	drainRun     = 100
	drainRunTime = time.Second
)

// drainOne handles a run of parked events of key, from its head headID on,
// in one transaction holding their row locks, so an operator's skip of the
// head waits for the outcome and never both happen. It stops at the first
// failure (which is then the key's head, with its failure recorded), at an
// event whose next attempt is not due, or at the run's limits. It returns
// the key's next head when that is due now, else 0, and whether the head
// loop should scan again (a head to schedule, or one to find).
func (r *runner) drainOne(ctx context.Context, key string, headID int64) (next int64, rescan bool, err error) {
	db := r.hard
	tx, err := r.cfg.Pool.Begin(db)
	if err != nil {
		return 0, false, err
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // no-op after commit

	run, err := r.cfg.Eng.LockParkedRun(db, tx, r.cfg.SubID, key, headID, drainRun)
	if errors.Is(err, engine.ErrLocked) {
		return 0, false, nil // an operator action holds it (for at most its lock timeout): the periodic scan comes back
	}
	if err == nil && (len(run) == 0 || run[0].ID != headID) {
		return 0, true, nil // resolved meanwhile (say, skipped): look for the key's new head
	}
	if err != nil {
		return 0, false, err
	}
	if older, err := r.cfg.Eng.HasOlderRetry(db, tx, r.cfg.SubID, key, headID); err != nil || older {
		return 0, err == nil, err // not the head: the next scan finds the real one
	}
	ids := make([]int64, len(run))
	for i, ev := range run {
		ids[i] = ev.ID
	}
	fails, err := store.Failures(db, tx, r.cfg.Queue, r.cfg.Consumer, ids)
	if err != nil {
		return 0, false, err
	}

	start := time.Now()
	var done []int64 // handled or dead-lettered, in order
	var dead []store.DeadLetter
	stopped := false // a failure or a not-due event ends the run
	for i, ev := range run {
		if f, ok := fails[ev.ID]; ok && !f.Due {
			stopped = true
			break
		}
		if ctx.Err() != nil || (i > 0 && time.Since(start) > drainRunTime) {
			break
		}
		attempt := int(ev.Retry) + 1
		res := r.call(ev, attempt)
		if res.Err == nil {
			done = append(done, ev.ID)
			continue
		}
		if r.hard.Err() != nil {
			return 0, false, nil // shutdown: the rollback leaves every event as it was
		}
		if r.exhausted(res, attempt) {
			// Commit the dead letter before the key's next event runs: were
			// this transaction lost, the event would be tried again after
			// its successor.
			done = append(done, ev.ID)
			dead = append(dead, r.deadLetter(ev, attempt, res))
			break
		}
		if err := r.cfg.Eng.SetRetryCount(db, tx, r.cfg.SubID, ev.ID, int32(attempt)); err != nil {
			return 0, false, err
		}
		f := store.Failure{EvID: ev.ID, Attempts: attempt, LastError: errText(res.Err)}
		if err := store.PutFailure(db, tx, r.cfg.Queue, r.cfg.Consumer, f, r.retryDelay(res, attempt)); err != nil {
			return 0, false, err
		}
		stopped = true
		break
	}
	if err := r.resolve(db, tx, done, dead); err != nil {
		return 0, false, err
	}
	r.cfg.Stats.DeadLettered.Add(int64(len(dead)))
	if stopped || ctx.Err() != nil {
		return 0, stopped, nil // stopped: the key's head has a new next attempt to schedule
	}
	// The key's next parked event is its new head: due now unless it has
	// failed before (then its own schedule applies).
	last := headID
	if len(done) > 0 {
		last = done[len(done)-1]
	}
	nextEv, ok, err := r.cfg.Eng.NextRetry(ctx, r.cfg.Pool, r.cfg.SubID, key, last)
	if err != nil || !ok {
		return 0, false, err
	}
	return nextEv.ID, false, nil
}

// expire dead-letters the head headID of key (blocked longer than
// MaxBlocked) under its row lock and returns the key's next parked event.
func (r *runner) expire(ctx context.Context, key string, headID int64) (int64, error) {
	db := r.hard
	tx, err := r.cfg.Pool.Begin(db)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // no-op after commit
	run, err := r.cfg.Eng.LockParkedRun(db, tx, r.cfg.SubID, key, headID, 1)
	if errors.Is(err, engine.ErrLocked) || (err == nil && (len(run) == 0 || run[0].ID != headID)) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	fails, err := store.Failures(db, tx, r.cfg.Queue, r.cfg.Consumer, []int64{headID})
	if err != nil {
		return 0, err
	}
	f := fails[headID]
	ev := run[0]
	dl := store.DeadLetter{Queue: r.cfg.Queue, Group: r.cfg.Group, Slot: r.cfg.Slot, EvID: ev.ID, EvTime: ev.Time,
		Type: ev.Type, Data: ev.Data, Key: ev.Key, Attempts: max(f.Attempts, int(ev.Retry)), LastError: f.LastError,
		Reason: "max_blocked", Actor: "worker"}
	if err := r.resolve(db, tx, []int64{ev.ID}, []store.DeadLetter{dl}); err != nil {
		return 0, err
	}
	r.cfg.Stats.DeadLettered.Add(1)
	r.log.Warn("partitionq: head dead-lettered: key blocked longer than MaxBlocked", slog.String("key", key),
		slog.Int64("event_id", ev.ID), slog.Duration("blocked", f.Age))
	next, ok, err := r.cfg.Eng.NextRetry(ctx, r.cfg.Pool, r.cfg.SubID, key, ev.ID)
	if err != nil || !ok {
		return 0, err
	}
	return next.ID, nil
}

// resolve removes handled (and dead-lettered) events from the retry queue
// in tx, with their failure records, stores the dead letters and commits.
func (r *runner) resolve(ctx context.Context, tx pgx.Tx, ids []int64, dead []store.DeadLetter) error {
	if len(ids) > 0 {
		if err := r.cfg.Eng.DeleteRetries(ctx, tx, r.cfg.SubID, ids); err != nil {
			return err
		}
		if err := store.DeleteFailures(ctx, tx, r.cfg.Queue, r.cfg.Consumer, ids); err != nil {
			return err
		}
	}
	if err := store.AddDeadLetters(ctx, tx, dead); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
