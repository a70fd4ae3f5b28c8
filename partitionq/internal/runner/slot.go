package runner

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/partitionq/partitionq/partitionq/internal/engine"
	"github.com/partitionq/partitionq/partitionq/internal/parked"
)

// slotRun is one owned slot, from the moment the worker took it (at epoch)
// until it released or lost it. A slot taken again later is a new slotRun.
type slotRun struct {
	r      *Runner
	slot   int
	epoch  int64
	reason string // why the slot came to this worker (lease.Reason*; "": no move)
	info   parked.Slot
	stats  *Stats

	// ctx is the parent of every handler call of the slot: cancelled when
	// the slot is lost, and when the worker's shutdown timeout passes.
	ctx    context.Context
	cancel context.CancelCauseFunc
	lost   atomic.Bool

	// A resize: a new slot's parents are all handed off (it may open
	// batches); an old slot standing at the cutover is being handed off,
	// and none of its drains starts any more.
	parentsDone, handingOff, noDrains atomic.Bool
	// leaving: the slot is being handed over to another worker (a
	// balancing move, handover.go): no new handler run or drain starts;
	// what runs finishes and commits.
	leaving atomic.Bool

	sem   chan struct{} // handler calls at once
	calls *atomic.Int64 // the slot's calls in flight in this process, every run of it (Calls)

	mu       sync.Mutex
	loaded   bool              // the blocked keys and progress were read from the database
	batch    *batchRun         // the open batch, nil when idle
	finished chan struct{}     // closed when batch ends
	blocked  map[string]uint64 // keys with parked events (a superset), with the generation of their last mark
	gen      uint64
	draining map[string]bool
	lastTick int64 // how far the slot has read: the tick its last batch ended at, or a cohort read skipped it to (0: unknown)
	pos      int64 // where its engine consumer stands (0: unknown); behind lastTick only after skips (open.go)
	cold     bool  // its last batch, or the last read that looked at it, had no event of its own
	small    bool  // its last batch had events of its own, and was small enough for a look to peek at (open.go)
	// drainedIDs are parked events its drains handled, not yet recorded
	// as done (the next flush does: progress.go).
	drainedIDs []int64

	// handled and failed count handler outcomes not yet added to the slot's
	// counters in the database (partitionq.slot_progress).
	handled, failed atomic.Int64
}

type counts struct{ handled, failed int64 }

func (s *slotRun) takeCounts() counts {
	return counts{handled: s.handled.Swap(0), failed: s.failed.Swap(0)}
}

func (s *slotRun) putCounts(c counts) {
	s.handled.Add(c.handled)
	s.failed.Add(c.failed)
}

func newSlotRun(r *Runner, n int, epoch int64) *slotRun {
	ctx, cancel := context.WithCancelCause(r.hard)
	info := r.slotInfo(n)
	info.Epoch = epoch
	return &slotRun{r: r, slot: n, epoch: epoch, info: info, stats: r.cfg.Stats[n], ctx: ctx, cancel: cancel,
		sem: make(chan struct{}, r.cfg.Concurrency), calls: r.calls.counter(r.cfg.Generation, n),
		blocked: map[string]uint64{}, draining: map[string]bool{}}
}

// kill stops everything of the slot at once.
func (s *slotRun) kill(cause error) {
	s.lost.Store(true)
	s.cancel(cause)
}

// active reports whether the slot may still run handlers and commit.
func (s *slotRun) active() bool { return !s.lost.Load() && s.r.lease.Valid() }

// activeNow is active, with the time.Now reading the lease was checked at.
func (s *slotRun) activeNow() (time.Time, bool) {
	now := time.Now()
	return now, !s.lost.Load() && s.r.lease.ValidAt(now)
}

// taking reports whether the slot may start new work: it is active and
// not being handed over.
func (s *slotRun) taking() bool { return s.active() && !s.leaving.Load() }

// waitIdle waits until the slot's open batch (if any) stopped.
func (s *slotRun) waitIdle() {
	s.mu.Lock()
	ch := s.finished
	s.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

// call runs the handler for one event with the slot's limits. aborted
// reports a call that did not run or was cut short by the slot's loss or
// the worker's shutdown: not the event's fault, and nothing of it is kept.
func (s *slotRun) call(c Call) (res Result, aborted bool) {
	g, now, err := s.enter(c.Event.Key, c.Event.ID)
	defer g.leave()
	if err != nil {
		return Result{Err: err}, true
	}
	return s.callHeld(now, c)
}

// callHeld runs the handler for one event under a hold on the slot's
// limits (enter), the lease found valid at now (the start of the call's
// timeout). aborted is as call's.
func (s *slotRun) callHeld(now time.Time, c Call) (res Result, aborted bool) {
	ctx, cc := s.handlerCtx(now)
	res = safeCall(ctx, s.r.cfg.Handle, c)
	cc.end()
	if s.ctx.Err() != nil {
		return res, true
	}
	if res.Err == nil {
		s.stats.Handled.Add(1)
		return res, false
	}
	return s.callFailed(ctx, res, c.Event.Key, c.Event.ID, c.Attempt), false
}

// handlerCtx is the context of one handler call that starts at now: the
// slot's, with the handler timeout when there is one (cc, nil without;
// cc.end must follow the call).
func (s *slotRun) handlerCtx(now time.Time) (ctx context.Context, cc *callCtx) {
	t := s.r.cfg.HandlerTimeout
	if t <= 0 {
		return s.ctx, nil
	}
	cc = newCallCtx(s.ctx, now.Add(t))
	return cc, cc
}

// callRun runs the run handler for a run of events of one key with the
// slot's limits (one call: one place in the slot's concurrency, one
// handler timeout). aborted is as call's: nothing of the run is kept.
func (s *slotRun) callRun(c RunCall) (res RunResult, aborted bool) {
	first := c.Events[0]
	g, now, err := s.enter(first.Key, first.ID)
	defer g.leave()
	if err != nil {
		return RunResult{Failed: Result{Err: err}}, true
	}
	ctx, cc := s.handlerCtx(now)
	res = safeRunCall(ctx, s.r.cfg.HandleRun, c)
	cc.end()
	if s.ctx.Err() != nil {
		return res, true
	}
	res.Done = min(max(res.Done, 0), len(c.Events))
	s.stats.Handled.Add(int64(res.Done))
	if res.Done == len(c.Events) {
		return res, false
	}
	ev := c.Events[res.Done]
	res.Failed = s.callFailed(ctx, res.Failed, ev.Key, ev.ID, c.Attempts[res.Done])
	return res, false
}

// callFailed counts and logs a handler failure of event id (of key) at
// attempt, saying so when the call timed out.
func (s *slotRun) callFailed(ctx context.Context, res Result, key string, id int64, attempt int) Result {
	s.stats.Failed.Add(1)
	if ctx.Err() == context.DeadlineExceeded {
		res.Err = fmt.Errorf("handler timed out after %s: %w", s.r.cfg.HandlerTimeout, res.Err)
	}
	s.r.log.Warn("partitionq: handler failed", slog.Int("slot", s.slot), slog.String("key", key),
		slog.Int64("event_id", id), slog.Int("attempt", attempt), slog.Any("error", res.Err))
	return res
}

// callGuard is a hold on the slot's limits for handler calls of one key,
// taken by enter and given back by leave.
type callGuard struct {
	s     *slotRun
	key   string
	keyed bool // holds the key (KeyGuard)
	room  bool // holds a place in the slot's concurrency
}

// enter takes the slot's limits for calls of key's events (from the event
// id on), one after another: the count of calls in flight, a place in the
// slot's concurrency, the key in the process; then it checks the lease,
// once, at now. err (the slot lost, the worker stopping) means no call may
// run. Call g.leave in every case.
func (s *slotRun) enter(key string, id int64) (g callGuard, now time.Time, err error) {
	// The counter first, then the check: a run that waits for this one's
	// calls to end (waitRuns) either sees this call counted, or this call
	// sees the slot stopped.
	s.calls.Add(1)
	g.s = s
	if s.lost.Load() {
		return g, now, errLost
	}
	select {
	case s.sem <- struct{}{}:
		g.room = true
	case <-s.ctx.Done():
		return g, now, context.Cause(s.ctx)
	}
	if kg := s.r.cfg.Keys; kg != nil {
		here := Where{N: s.r.cfg.N, Slot: s.slot, Epoch: s.epoch, EventID: id}
		if !kg.enter(key, here, s.ctx.Done(), func(w Where) { s.r.keyWait(key, here, w) }) {
			return g, now, context.Cause(s.ctx)
		}
		g.key, g.keyed = key, true
	}
	// Last, after the waits for room and for the key: the lease may have
	// lapsed meanwhile.
	now, ok := s.activeNow()
	if !ok {
		return g, now, errLost
	}
	return g, now, nil
}

// leave gives back what enter took.
func (g *callGuard) leave() {
	if g.keyed {
		g.s.r.cfg.Keys.leave(g.key)
	}
	if g.room {
		<-g.s.sem
	}
	g.s.calls.Add(-1)
}

func safeCall(ctx context.Context, h Handler, c Call) (res Result) {
	defer func() {
		if p := recover(); p != nil {
			res = Result{Err: fmt.Errorf("handler panicked: %v", p)}
		}
	}()
	return h(ctx, c)
}

func safeRunCall(ctx context.Context, h RunHandler, c RunCall) (res RunResult) {
	defer func() {
		if p := recover(); p != nil {
			res = RunResult{Failed: Result{Err: fmt.Errorf("handler panicked: %v", p)}}
		}
	}()
	return h(ctx, c)
}

// retryDelay is how long to wait before the next attempt after attempt failed.
func (r *Runner) retryDelay(res Result, attempt int) time.Duration {
	if res.RetryAfter > 0 {
		return res.RetryAfter
	}
	return r.cfg.Backoff(attempt)
}

// exhausted reports whether a failure of attempt ends the event's tries,
// and why.
func (r *Runner) exhausted(res Result, attempt int) (bool, string) {
	if res.DeadLetter {
		return true, "handler"
	}
	if r.cfg.MaxAttempts > 0 && attempt >= r.cfg.MaxAttempts {
		return true, "max_attempts"
	}
	return false, ""
}

// ---------------------------------------------------------------- blocked keys

// The slot keeps the set of its keys with parked events in memory: read
// from the engine's retry queue when the slot is taken, grown when a batch
// parks events (after its commit), shrunk when a drain finds a key empty. It
// is a superset of the truth: a key is removed only when no park of it
// happened since the drain (or scan) that found it empty began (its
// generation is unchanged), so a key with parked events is never missing,
// and an event of a blocked key is never handled before its head. (A key
// in the set that is no longer blocked, after an operator's skip, only
// makes its next events wait one drain.)

func (s *slotRun) isBlocked(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.blocked[key]
	return ok
}

func (s *slotRun) markBlocked(keys []string) {
	if len(keys) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		s.gen++
		s.blocked[k] = s.gen
	}
}

// generation returns the key's generation (0: not in the set).
func (s *slotRun) generation(key string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.blocked[key]
}

// unblock removes key if it was not marked since generation gen was read.
func (s *slotRun) unblock(key string, gen uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g, ok := s.blocked[key]; ok && g == gen {
		delete(s.blocked, key)
	}
}

func (s *slotRun) blockedKeys() (map[string]uint64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.blocked) == 0 {
		return nil, false
	}
	out := make(map[string]uint64, len(s.blocked))
	for k, g := range s.blocked {
		out[k] = g
	}
	return out, true
}

// item is one event of a batch in its key's lane.
type item struct {
	ev *engine.SlotEvent // in its read's chunk
	ks *keyState
}

// keyState is what one batch knows of a key. Only the key's lane touches it
// once dispatched (the lanes dispatcher runs one item of a key at a time).
type keyState struct {
	blocked bool // pause: the key has an unresolved head; its events are parked
}
