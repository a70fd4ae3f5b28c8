package partitionq

import (
	"errors"
	"fmt"
	"time"
)

// Live reports whether the worker is alive: nil while it runs and its
// loops turn, an error saying what is wrong otherwise. It answers a
// liveness probe (restart the process when it fails for a while): it
// fails when the worker has not started or has stopped (with why it
// stopped on its own, see Err), or when a loop of the worker (the one that
// renews its lease and takes slots, or the one that looks for new ticks and
// opens batches, of any generation it runs) has not started a turn for
// Limits.LivenessTimeout (1 minute by default), as when a statement hangs
// on a connection that a network partition froze. A database that is down
// or refuses the worker does not make it fail: the loops go on trying
// (Ready fails then), and a restart would not help. While the worker stops
// (after Stop, bounded by ShutdownTimeout) it is alive.
//
// It reads the worker's own state only (no query) and is safe for
// concurrent use, as often as a probe likes.
func (w *Worker) Live() error {
	select {
	case <-w.done:
		if err := w.Err(); err != nil {
			return fmt.Errorf("partitionq: the worker has stopped: %w", err)
		}
		return errors.New("partitionq: the worker has stopped")
	default:
	}
	if !w.running.Load() {
		return errors.New("partitionq: the worker has not started")
	}
	if w.soft.Err() != nil {
		return nil // stopping: bounded by ShutdownTimeout
	}
	now := time.Now()
	bound := w.cfg.Limits.LivenessTimeout
	for _, gr := range w.runs() {
		for _, loop := range []struct {
			what string
			at   time.Time
		}{
			{"the loop that renews its lease", gr.runner.Lease().Turned()},
			{"the loop that looks for new ticks and opens batches", gr.runner.LoopTurned()},
		} {
			if loop.at.IsZero() { // not running yet: the worker is registering
				continue
			}
			if d := now.Sub(loop.at); d > bound {
				return fmt.Errorf("partitionq: the worker is stuck: %s (slots of %d) has not turned for %s, more than the liveness timeout (%s)",
					loop.what, gr.n, d.Round(time.Millisecond), bound)
			}
		}
	}
	return nil
}

// Ready reports whether the worker is ready: nil when it is alive (Live),
// not stopping, registered and renewing its lease, for every generation of
// the group it runs; an error saying what is missing otherwise. It answers
// a readiness probe. A worker that owns no slot (a standby: the slots it
// wants are owned by other live workers) is ready: it renews its lease and
// takes a slot as soon as its owner stops or dies. A worker whose lease
// was not renewed in time (the database is down, or refuses it) is not
// ready: it has stopped the handlers of its slots, and is ready again
// once a renewal succeeds.
//
// It reads the worker's own state only (no query) and is safe for
// concurrent use, as often as a probe likes.
func (w *Worker) Ready() error {
	if err := w.Live(); err != nil {
		return err
	}
	if w.soft.Err() != nil {
		return errors.New("partitionq: the worker is stopping")
	}
	runs := w.runs()
	if len(runs) == 0 {
		return errors.New("partitionq: the worker runs no slots of the group yet")
	}
	now := time.Now()
	for _, gr := range runs {
		l := gr.runner.Lease()
		if l.WorkerID() == 0 {
			return fmt.Errorf("partitionq: the worker is not registered yet (slots of %d): the database has not answered yet, or refused it (see the log)", gr.n)
		}
		if !l.Valid() {
			return fmt.Errorf("partitionq: the worker's lease (slots of %d) was last renewed %s ago: its slots are stopped until a renewal succeeds (the database does not answer, or refuses the worker: see the log)",
				gr.n, now.Sub(l.Renewed()).Round(time.Millisecond))
		}
	}
	return nil
}

// runs returns the generation runs that are neither stopping nor done.
func (w *Worker) runs() []*genRun {
	w.genMu.Lock()
	defer w.genMu.Unlock()
	var out []*genRun
	seen := map[int]bool{}
	for _, n := range w.order {
		gr := w.gens[n]
		if seen[n] || gr == nil || gr.ctx.Err() != nil {
			continue
		}
		select {
		case <-gr.done:
			continue
		default:
		}
		seen[n] = true
		out = append(out, gr)
	}
	return out
}
