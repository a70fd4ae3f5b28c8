package runner

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/partitionq/partitionq/partitionq/internal/engine"
	"github.com/partitionq/partitionq/partitionq/internal/lease"
	"github.com/partitionq/partitionq/partitionq/internal/parked"
)

// headLoop schedules the drains of blocked keys of every owned slot (pause
// policy). It looks at the slots' heads (one read for all slots) when a
// batch parked events, when a drain leaves a head to schedule, at the
// earliest next attempt, and at least every HeadScanInterval while some key
// is blocked (so that an operator's "retry now" is seen); while no key is
// blocked it reads nothing.
func (r *Runner) headLoop() {
	next := time.Now()
	for r.stop.Err() == nil {
		if d := time.Until(next); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-r.stop.Done():
			case <-r.headWake:
			case <-t.C:
			}
			t.Stop()
		}
		if r.stop.Err() != nil {
			return
		}
		next = r.scanHeads()
	}
}

// Drain limits: one transaction handles at most drainRun events of a key,
// or goes on for at most drainRunTime, before it commits what it handled.
const (
	drainRun     = 100
	drainRunTime = time.Second
)

// scanHeads starts a drain for every blocked key whose head is due and
// returns when to look again.
func (r *Runner) scanHeads() time.Time {
	idle := time.Now().Add(time.Hour) // woken when something is parked
	next := time.Now().Add(r.cfg.HeadScanInterval)
	var slots []*slotRun
	var infos []parked.Slot
	gens := map[int]map[string]uint64{}
	for _, s := range r.ownedSlots() {
		if keys, ok := s.blockedKeys(); ok {
			slots = append(slots, s)
			infos = append(infos, s.info)
			gens[s.slot] = keys
		}
	}
	if len(slots) == 0 {
		return idle
	}
	heads, err := parked.Heads(r.stop, r.cfg.Pool, r.cfg.Eng, infos, nil)
	if err != nil {
		if r.stop.Err() == nil {
			r.log.Warn("partitionq: reading blocked keys failed", slog.Any("error", err))
		}
		return next
	}
	bySlot := map[int]*slotRun{}
	for _, s := range slots {
		bySlot[s.slot] = s
	}
	seen := map[int]map[string]bool{}
	for _, h := range heads {
		if seen[h.Slot] == nil {
			seen[h.Slot] = map[string]bool{}
		}
		seen[h.Slot][h.Key] = true
	}
	// Keys without parked events any more (resolved by an operator, or a
	// drain) leave the set, unless something was parked since the read.
	for n, keys := range gens {
		for k, g := range keys {
			if !seen[n][k] {
				bySlot[n].unblock(k, g)
			}
		}
	}
	for _, h := range heads {
		s := bySlot[h.Slot]
		if s == nil || !h.Parked() {
			// A timed retry (skip policy): the engine's mover re-delivers it.
			continue
		}
		f := h.Failure
		if f != nil && r.cfg.MaxBlocked > 0 && f.Age > r.cfg.MaxBlocked {
			if r.cfg.MaxBlockedDeadLetter {
				r.startDrain(s, h.Key, h.ID, true)
				continue
			}
			if f.FlaggedAt == nil {
				if isNew, err := parked.Flag(r.stop, r.cfg.Pool, s.info, h.ID); err == nil && isNew {
					r.log.Warn("partitionq: key blocked longer than MaxBlocked", slog.Int("slot", s.slot), slog.String("key", h.Key),
						slog.Int64("event_id", h.ID), slog.Duration("blocked", f.Age), slog.Int("attempts", f.Attempts))
				}
			}
		}
		if f != nil && !f.Due {
			if at := time.Now().Add(f.Wait); at.Before(next) {
				next = at
			}
			continue
		}
		r.startDrain(s, h.Key, h.ID, false)
	}
	return next
}

// fence is the ownership check a drain runs before it commits.
func (s *slotRun) fence(ctx context.Context, tx pgx.Tx) error {
	if !s.active() {
		return lease.ErrNotOwner
	}
	return lease.Fence(ctx, tx, s.r.cfg.Queue, s.r.cfg.Group, s.r.cfg.Generation, []int{s.slot}, []int64{s.epoch})
}

// startDrain drains key of slot s from headID on (dead-lettering the head
// first when expire is set), unless a drain of the key is running.
func (r *Runner) startDrain(s *slotRun, key string, headID int64, expire bool) {
	s.mu.Lock()
	if s.draining[key] || s.noDrains.Load() {
		s.mu.Unlock()
		return
	}
	s.draining[key] = true
	s.mu.Unlock()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		rescan := false
		defer func() { // after the key leaves draining (below), so the scan may drain it again
			if rescan {
				signal(r.headWake)
			}
		}()
		defer func() {
			s.mu.Lock()
			delete(s.draining, key)
			s.mu.Unlock()
		}()
		if !r.drainTurn(s) {
			rescan = s.ctx.Err() == nil // the scan starts it again if the slot takes drains again
			return
		}
		defer r.drains.give()
		gen := s.generation(key)
		ctx := s.ctx
		id := headID
		if expire {
			next, err := parked.Expire(ctx, r.cfg.Pool, r.cfg.Eng, s.info, key, id, s.fence)
			if err != nil {
				r.drainFailed(s, key, err, "dead-lettering a key blocked too long failed")
				rescan = true
				return
			}
			s.stats.DeadLettered.Add(1)
			r.log.Warn("partitionq: head dead-lettered: key blocked longer than MaxBlocked", slog.Int("slot", s.slot),
				slog.String("key", key), slog.Int64("event_id", id))
			if id = next; id == 0 {
				s.unblock(key, gen)
			}
		}
		for id != 0 && ctx.Err() == nil && s.taking() {
			res, err := parked.Drain(ctx, r.cfg.Pool, r.cfg.Eng, s.info, key, id, parked.Limits{Events: drainRun, Time: drainRunTime},
				parked.DrainHooks{
					Handle: func(ev engine.Event, attempt int) parked.Handled { return r.drainCall(s, ev, attempt) },
					Settle: func(done []int64) { r.settleDrained(s, done) },
					Fence:  s.fence,
				})
			if err != nil {
				r.drainFailed(s, key, err, "draining a blocked key failed")
				rescan = true
				return
			}
			s.stats.DeadLettered.Add(int64(res.Dead))
			if res.Empty {
				s.unblock(key, gen)
			}
			id, rescan = res.Next, res.Rescan
		}
	}()
}

// drainTurn waits for a drain's turn: drains bounds the connections the
// worker's drains hold (drainturns.go), and other slots' drains may hold
// every turn for a while (each runs its key for up to drainRunTime at a
// time). A drain not started yet gives its wait up when its slot stops
// starting drains (a handover or a resize's handoff waits for the slot's
// drains to end) or ends; false then.
func (r *Runner) drainTurn(s *slotRun) bool {
	stopped := func() bool { return s.noDrains.Load() || !s.taking() }
	start := time.Now()
	var t *time.Ticker
	for {
		if r.drains.take(time.Since(start)) {
			if stopped() {
				r.drains.give()
				return false
			}
			return true
		}
		if t == nil {
			t = time.NewTicker(10 * time.Millisecond)
			defer t.Stop()
		}
		select {
		case <-r.drains.freed:
		case <-s.ctx.Done():
			return false
		case <-t.C:
			if stopped() {
				return false
			}
		}
	}
}

// drainCall handles one parked event in a drain.
// With a run handler, the event is a run of one.
func (r *Runner) drainCall(s *slotRun, ev engine.Event, attempt int) parked.Handled {
	var res Result
	var aborted bool
	if r.cfg.HandleRun != nil {
		var rr RunResult
		rr, aborted = s.callRun(RunCall{Events: []engine.Event{ev}, Attempts: []int{attempt}, N: s.r.cfg.N, Slot: s.slot, Epoch: s.epoch})
		res = rr.Failed
		if rr.Done == 1 {
			res = Result{}
		}
	} else {
		res, aborted = s.call(Call{Event: ev, N: s.r.cfg.N, Slot: s.slot, Epoch: s.epoch, Attempt: attempt})
	}
	if aborted {
		return parked.Handled{Abort: true}
	}
	if res.Err == nil {
		s.handled.Add(1)
		r.drained(s, ev.ID)
		return parked.Handled{OK: true}
	}
	s.failed.Add(1)
	if dead, reason := r.exhausted(res, attempt); dead {
		return parked.Handled{Dead: true, Reason: reason, Err: errText(res.Err)}
	}
	return parked.Handled{Err: errText(res.Err), Delay: r.retryDelay(res, attempt)}
}

func (r *Runner) drainFailed(s *slotRun, key string, err error, what string) {
	if errors.Is(err, lease.ErrNotOwner) {
		r.loseRun(s, "another worker took the slot over")
		return
	}
	if s.ctx.Err() == nil && r.stop.Err() == nil {
		r.log.Warn("partitionq: "+what, slog.Int("slot", s.slot), slog.String("key", key), slog.Any("error", err))
	}
}
