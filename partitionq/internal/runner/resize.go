package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/partitionq/partitionq/partitionq/internal/db"
	"github.com/partitionq/partitionq/partitionq/internal/lease"
	"github.com/partitionq/partitionq/partitionq/internal/store"
)

// A resize (docs/architecture.md, "Resizing a group") runs through the
// runners of both generations, each doing its part of the protocol (the
// functions resize, resize_cutover, resize_handoff and resize_abort of
// partitionq's schema, partitionq/internal/store/function/):
//
//   - the old generation's runner keeps every slot at or before the cutover
//     tick (openBatches), registers the new slots at the cutover when its
//     tick appears (store.Cutover), and hands a slot that stands at the
//     cutover off to the new generation (handoff): its blocked keys' parked
//     events move to the keys' new slots, and its consumer is unregistered;
//   - the new generation's runner opens no batch of a slot before every
//     parent slot of it is handed off (parentsDone), so that a key's events
//     before the cutover are resolved before any of its later ones start,
//     and its reads take the parents' timed retries the engine re-delivers
//     after the cutover (ReadSpec.Owners).

// parentsDone returns the slots of idle whose parent slots (of the
// generation before, store.Parents) are all handed off; a slot found so
// stays so.
func (r *Runner) parentsDone(idle []*slotRun) ([]*slotRun, error) {
	var waiting []*slotRun
	for _, s := range idle {
		if !s.parentsDone.Load() {
			waiting = append(waiting, s)
		}
	}
	if len(waiting) == 0 {
		return idle, nil
	}
	left, err := lease.RemainingSlots(r.stop, r.cfg.Pool, r.cfg.Queue, r.cfg.Group, r.cfg.ParentGeneration)
	if err != nil {
		return nil, err
	}
	out := idle[:0:0]
	for _, s := range idle {
		if !s.parentsDone.Load() {
			done := true
			for _, p := range store.Parents(r.cfg.Parent, r.cfg.N, s.slot) {
				done = done && !left[p]
			}
			if !done {
				continue
			}
			s.parentsDone.Store(true)
			r.log.Info("partitionq: slot starts: its parent slots are handed off", slog.Int("slot", s.slot),
				slog.Any("parents", store.Parents(r.cfg.Parent, r.cfg.N, s.slot)), slog.Int("parent_slots", r.cfg.Parent))
		}
		out = append(out, s)
	}
	return out, nil
}

// handoffLockTimeout bounds how long a handoff waits for the row locks of
// the slot's parked events (an operator acting on one); then it tries
// again later.
const handoffLockTimeout = 5 * time.Second

// startHandoff hands slot s, which stands at the cutover with no open
// batch, off to the new generation, unless that is under way: first no
// drain of it starts and the running ones end, then one transaction does
// the handoff (store.Handoff, fenced by the slot's epoch). The slot then
// exists no more: the runner drops it, and the lease forgets it.
func (r *Runner) startHandoff(s *slotRun) {
	if s.handingOff.Swap(true) {
		return
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		err := r.handoff(s)
		if err == nil {
			return
		}
		s.handingOff.Store(false)
		s.noDrains.Store(false)
		if errors.Is(err, lease.ErrNotOwner) || db.Code(err) == codeNotOwner {
			r.loseRun(s, "another worker took the slot over")
			return
		}
		if r.stop.Err() == nil && s.active() {
			r.log.Warn("partitionq: handing the slot off to the new generation failed; trying again", slog.Int("slot", s.slot), slog.Any("error", err))
			sleep(r.stop, time.Second)
			signal(r.wake)
		}
	}()
}

const codeNotOwner = "PQ001"

func (r *Runner) handoff(s *slotRun) error {
	s.noDrains.Store(true)
	for {
		s.mu.Lock()
		busy := len(s.draining) > 0 || s.batch != nil
		s.mu.Unlock()
		if !busy {
			break
		}
		if r.stop.Err() != nil || !s.active() {
			return errors.New("stopped")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !s.active() {
		return lease.ErrNotOwner
	}
	var complete bool
	ctx, cancel := context.WithTimeout(r.stop, handoffLockTimeout+10*time.Second)
	defer cancel()
	err := pgx.BeginFunc(ctx, r.cfg.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fmt.Sprintf("set local lock_timeout = %d", handoffLockTimeout.Milliseconds())); err != nil {
			return err
		}
		var err error
		complete, err = store.Handoff(ctx, tx, r.cfg.Eng.Schema(), r.cfg.Queue, r.cfg.Group, s.slot, s.epoch)
		return err
	})
	if err != nil {
		return err
	}
	r.handedOff(s, complete)
	return nil
}

// handedOff drops slot s, handed off: its work is done, its consumer gone.
func (r *Runner) handedOff(s *slotRun, complete bool) {
	r.mu.Lock()
	if r.slots[s.slot] == s {
		delete(r.slots, s.slot)
	}
	r.mu.Unlock()
	r.lease.Forget(s.slot)
	s.kill(errHandedOff)
	r.cfg.Stats[s.slot].Owned.Store(false)
	r.log.Info("partitionq: slot drained to the cutover and handed off to the new generation", slog.Int("slot", s.slot))
	if complete {
		r.log.Info("partitionq: resize complete: every slot of this generation is handed off")
	}
}

var errHandedOff = errors.New("the slot was handed off to the group's new generation")
