package runner

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
)

// A balancing move hands a slot this worker owns over to another worker
// (lease.Config.OnLeave; the plan is lease's, balance.go). It is a graceful
// handoff, which repeats nothing:
//
//  1. the slot stops taking work: its open batch hands out no more events
//     (the read lets it go, events not yet started stay unresolved), no
//     drain of a blocked key starts, and a running drain ends after its
//     current transaction;
//  2. what runs finishes: handler runs in flight return and commit their
//     outcome as usual, within the move's bound (LeaveTimeout; past it
//     their contexts are cancelled, as when a slot is lost, and the move
//     waits for them to return);
//  3. the batch is left open, its progress recorded (abandon: every
//     resolved event, and what it parked or gave up); an idle slot's
//     consumer is moved to where the worker has read;
//  4. the slot's row is released, reserved for the member it goes to,
//     which is told at once (lease.Holder.HandOver) and takes it at a new
//     epoch: it opens the same batch, skips what the progress says is
//     resolved, and loads the slot's blocked keys (their heads, attempts
//     and next attempts are in the engine's retry queue and partitionq's
//     failure records, which do not move).

// errHandedOver stops what is left of a slot run after its handoff.
var errHandedOver = errors.New("the slot was handed over to another worker")

// leave is the lease's OnLeave: it starts the handoff of slot n to member
// to, unless one is under way.
func (r *Runner) leave(n int, to string) {
	r.mu.Lock()
	s := r.slots[n]
	r.mu.Unlock()
	if s == nil || s.leaving.Swap(true) {
		return
	}
	s.noDrains.Store(true)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.handOver(s, to)
	}()
}

// mayGive is the lease's MayGive: a slot is not handed over while a resize
// hands it off to the new generation.
func (r *Runner) mayGive(n int) bool {
	if r.cutover.Load() != 0 || r.stop.Err() != nil {
		return false
	}
	r.mu.Lock()
	s := r.slots[n]
	r.mu.Unlock()
	return s != nil && !s.handingOff.Load()
}

// handOver drains slot s and releases it for member to (see above). It
// returns early, leaving the slot as it is, when the slot is lost (its
// next owner resumes it as after any loss) or the worker stops (the stop
// releases every slot).
func (r *Runner) handOver(s *slotRun, to string) {
	start := time.Now()
	// A look that chose the slot before it began leaving publishes the
	// batch it opened before this returns; later looks leave it alone.
	r.lookMu.Lock()
	//lint:ignore SA2001 the wait for the look under way is the point
	r.lookMu.Unlock()
	cancelled := false
	for {
		s.mu.Lock()
		b := s.batch
		busy := b != nil || len(s.draining) > 0
		s.mu.Unlock()
		if !busy {
			break
		}
		if r.stop.Err() != nil || !s.active() {
			return
		}
		if !cancelled && r.cfg.LeaveTimeout > 0 && time.Since(start) > r.cfg.LeaveTimeout {
			cancelled = true
			r.log.Warn("partitionq: handler runs outlived the slot's handoff bound: cancelling them", slog.Int("slot", s.slot),
				slog.Duration("bound", r.cfg.LeaveTimeout))
			s.cancel(errHandedOver)
		}
		time.Sleep(5 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.stop), 10*time.Second)
	defer cancel()
	if p, l := s.snapshotPos(), s.snapshotLast(); p > 0 && p < l {
		var ok []bool
		var tos []int64
		err := pgx.BeginFunc(ctx, r.cfg.Pool, func(tx pgx.Tx) error {
			var err error
			ok, tos, err = r.advance(tx, []*slotRun{s})
			return err
		})
		if err == nil {
			r.movedAhead([]*slotRun{s}, ok, tos)
		}
	}
	if r.cfg.Progress {
		r.flush(ctx) // what its last drain handled
	}
	if !s.active() || r.stop.Err() != nil {
		return
	}
	r.mu.Lock()
	if r.slots[s.slot] == s {
		delete(r.slots, s.slot)
	}
	r.mu.Unlock()
	err := r.lease.HandOver(ctx, s.slot, s.epoch)
	s.kill(errHandedOver)
	r.cfg.Stats[s.slot].Owned.Store(false)
	if err != nil {
		r.log.Warn("partitionq: releasing a slot handed over failed; it is taken back and handed over again", slog.Int("slot", s.slot), slog.Any("error", err))
		return
	}
	r.log.Info("partitionq: slot handed over", slog.Int("slot", s.slot), slog.Int64("epoch", s.epoch), slog.String("to", to),
		slog.Duration("took", time.Since(start).Round(time.Millisecond)))
}
