package slot

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/partitionq/partitionq/partitionq/internal/engine"
	"github.com/partitionq/partitionq/partitionq/internal/lanes"
	"github.com/partitionq/partitionq/partitionq/internal/store"
)

// keyState is what one batch knows of a key. Only the lane of that key
// touches it once dispatched (the lanes dispatcher orders its calls).
type keyState struct {
	blocked bool // pause: the key has an unresolved head; its events are parked
}

type item struct {
	ev engine.Event
	ks *keyState
}

// outcome collects what a batch must write when it finishes. Everything is
// written in the batch's own transaction together with finish_batch, so a
// crash before the commit leaves the batch open and nothing half-written.
type outcome struct {
	mu         sync.Mutex
	retry      []engine.RetryRow // parked (pause) or timed retries (skip)
	failures   []failure         // pause: heads that failed in this batch
	dead       []store.DeadLetter
	incomplete bool // some event was not resolved (shutdown)
}

type failure struct {
	f     store.Failure
	after time.Duration
}

func (o *outcome) add(fn func()) {
	o.mu.Lock()
	fn()
	o.mu.Unlock()
}

// processBatch handles the slot's share of one batch and finishes it.
func (r *runner) processBatch(batch int64) error {
	ctx := r.hard
	tx, err := r.conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // no-op after commit

	cur, evs, err := r.cfg.Eng.OpenBatchCursor(ctx, tx, batch, r.cfg.Slot, r.cfg.N, r.cfg.ChunkSize)
	if err != nil {
		return err
	}
	// Rows of this subscription in the retry queue can only be added by this
	// slot's own batches (at finish), so if there are none now, no key of
	// this batch is blocked.
	hasRetry := false
	if r.cfg.Policy == Pause {
		if hasRetry, err = r.cfg.Eng.HasRetry(ctx, tx, r.cfg.SubID); err != nil {
			return err
		}
	}

	out := &outcome{}
	keys := map[string]*keyState{}
	d := lanes.New(r.cfg.Concurrency, func(_ string, it item) { r.handleInBatch(it, out) })
	count := 0
	for len(evs) > 0 {
		if hasRetry {
			if err := r.markBlocked(ctx, tx, evs, keys); err != nil {
				d.Wait()
				return err
			}
		}
		for _, ev := range evs {
			ks := keys[ev.Key]
			if ks == nil {
				ks = &keyState{}
				keys[ev.Key] = ks
			}
			d.Add(ev.Key, item{ev: ev, ks: ks})
		}
		count += len(evs)
		if r.stop.Err() != nil {
			out.add(func() { out.incomplete = true })
			break
		}
		d.WaitBelow(2 * r.cfg.ChunkSize)
		if evs, err = cur.Next(ctx, r.cfg.ChunkSize); err != nil {
			d.Wait()
			return err
		}
	}
	d.Wait()
	if out.incomplete {
		r.log.Info("partitionq: stopping: batch left open for the next owner", slog.Int64("batch", batch))
		return nil
	}

	if err := r.cfg.Eng.PutRetry(ctx, tx, r.cfg.Queue, r.cfg.Consumer, out.retry); err != nil {
		return err
	}
	for _, f := range out.failures {
		if err := store.PutFailure(ctx, tx, r.cfg.Queue, r.cfg.Consumer, f.f, f.after); err != nil {
			return err
		}
	}
	if err := store.AddDeadLetters(ctx, tx, out.dead); err != nil {
		return err
	}
	if _, err := r.cfg.Eng.FinishBatch(ctx, tx, batch); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	r.cfg.Stats.Batches.Add(1)
	r.cfg.Stats.LastBatch.Store(time.Now().UnixNano())
	r.cfg.Stats.DeadLettered.Add(int64(len(out.dead)))
	if r.cfg.Policy == Pause && len(out.retry) > 0 {
		r.signal() // new parked events: failed heads to schedule, or waiting events due now
	}
	if count > 0 {
		r.log.Debug("partitionq: batch finished", slog.Int64("batch", batch), slog.Int("events", count),
			slog.Int("set_aside", len(out.retry)), slog.Int("dead", len(out.dead)))
	}
	return nil
}

// markBlocked marks the keys of evs not seen before in this batch that have
// events in the slot's retry queue.
func (r *runner) markBlocked(ctx context.Context, db engine.DB, evs []engine.Event, keys map[string]*keyState) error {
	var fresh []string
	seen := map[string]bool{}
	for _, ev := range evs {
		if keys[ev.Key] == nil && !seen[ev.Key] {
			seen[ev.Key] = true
			fresh = append(fresh, ev.Key)
		}
	}
	blocked, err := r.cfg.Eng.KeysWithRetry(ctx, db, r.cfg.SubID, fresh)
	if err != nil {
		return err
	}
	for k := range blocked {
		keys[k] = &keyState{blocked: true}
	}
	return nil
}

// handleInBatch handles one event of the batch, or sets it aside.
func (r *runner) handleInBatch(it item, out *outcome) {
	ev := it.ev
	if it.ks.blocked {
		// A waiting event is not a failure: its ev_retry is kept (H1).
		r.cfg.Stats.Parked.Add(1)
		out.add(func() { out.retry = append(out.retry, engine.RetryRow{Event: ev, After: engine.Far, Retry: ev.Retry}) })
		return
	}
	if r.stop.Err() != nil {
		out.add(func() { out.incomplete = true })
		return
	}
	attempt := int(ev.Retry) + 1
	res := r.call(ev, attempt)
	if res.Err == nil {
		return
	}
	if r.hard.Err() != nil { // cut short by shutdown: not the event's fault
		out.add(func() { out.incomplete = true })
		return
	}
	if r.exhausted(res, attempt) {
		dl := r.deadLetter(ev, attempt, res)
		out.add(func() { out.dead = append(out.dead, dl) })
		if r.cfg.Policy == Pause {
			// The key's later events of this batch wait (parked) until the
			// dead letter is committed with the batch: were the batch lost,
			// the event would be tried again after its successors.
			it.ks.blocked = true
		}
		return
	}
	delay := r.retryDelay(res, attempt)
	switch r.cfg.Policy {
	case Pause:
		it.ks.blocked = true
		out.add(func() {
			out.retry = append(out.retry, engine.RetryRow{Event: ev, After: engine.Far, Retry: int32(attempt)})
			out.failures = append(out.failures, failure{f: store.Failure{EvID: ev.ID, Attempts: attempt, LastError: errText(res.Err)}, after: delay})
		})
	case Skip:
		out.add(func() {
			out.retry = append(out.retry, engine.RetryRow{Event: ev, After: time.Now().Add(delay), Retry: int32(attempt)})
		})
	}
}

// deadLetter builds the dead letter of an event whose tries are over.
func (r *runner) deadLetter(ev engine.Event, attempt int, res Result) store.DeadLetter {
	reason := "max_attempts"
	if res.DeadLetter {
		reason = "handler"
	}
	r.log.Warn("partitionq: event dead-lettered", slog.String("key", ev.Key), slog.Int64("event_id", ev.ID),
		slog.Int("attempt", attempt), slog.String("reason", reason))
	return store.DeadLetter{Queue: r.cfg.Queue, Group: r.cfg.Group, Slot: r.cfg.Slot, EvID: ev.ID, EvTime: ev.Time,
		Type: ev.Type, Data: ev.Data, Key: ev.Key, Attempts: attempt, LastError: errText(res.Err), Reason: reason, Actor: "worker"}
}

// signal wakes the head loop.
func (r *runner) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}
