package runner

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/partitionq/partitionq/partitionq/internal/engine"
	"github.com/partitionq/partitionq/partitionq/internal/lanes"
	"github.com/partitionq/partitionq/partitionq/internal/parked"
	"github.com/partitionq/partitionq/partitionq/internal/progress"
	"github.com/partitionq/partitionq/partitionq/internal/slotstats"
)

// batchRun is one slot's open engine batch.
type batchRun struct {
	s     *slotRun
	info  engine.BatchInfo
	skip  progress.Set      // events a previous owner resolved: not run again
	track *progress.Tracker // nil without progress
	out   *parked.Outcome
	lanes *lanes.Dispatcher[item]
	keys  map[string]*keyState // only the reader touches it
	// The events of the chunk being read, handed to the lanes together at
	// its end (flushAdds): only the reader touches them.
	addKeys  []string
	addItems []item
	// What the chunk's events add to the batch's counters and progress,
	// also given at its end (flushAdds).
	readN     int64   // events of the slot's own read
	readLast  int64   // the last of them
	trackIDs  []int64 // the ids to add to the progress tracker
	trackDone []bool  // whether each was resolved already

	lastID     atomic.Int64 // the last event handed to the lanes (or skipped)
	events     atomic.Int64 // events of the slot's own in the batch (read so far)
	pending    atomic.Int64 // handed to the lanes, not done
	reader     atomic.Int64 // the read that hands out the batch's events (0: none)
	readDone   atomic.Bool
	incomplete atomic.Bool // some event was not resolved (the slot was lost, or the worker stops)
	ending     atomic.Bool
	done       chan struct{}
}

// batchLoop opens batches for the idle owned slots when new ticks may be
// there, until stop.
func (r *Runner) batchLoop() {
	poll := time.NewTicker(r.cfg.PollInterval)
	defer poll.Stop()
	adv := time.NewTicker(idleAdvance)
	defer adv.Stop()
	look := true
	for r.stop.Err() == nil {
		r.turned.Store(int64(time.Since(r.born)) + 1)
		if look {
			look = r.openBatches()
			if look {
				continue
			}
		}
		select {
		case <-r.stop.Done():
		case <-r.wake:
			look = true
		case <-poll.C:
			look = r.newTicks()
		case <-adv.C:
			r.advanceIdle()
		}
	}
}

// idleSlots returns the owned slots without an open batch.
func (r *Runner) idleSlots() []*slotRun {
	var out []*slotRun
	for _, s := range r.ownedSlots() {
		s.mu.Lock()
		idle := s.batch == nil
		s.mu.Unlock()
		if idle && s.taking() && !s.handingOff.Load() {
			out = append(out, s)
		}
	}
	return out
}

// newTicks reports whether an idle slot may have a new tick to read: one
// cheap read for all of them.
func (r *Runner) newTicks() bool {
	idle := r.idleSlots()
	if len(idle) == 0 {
		return false
	}
	last, err := r.cfg.Eng.LastTick(r.stop, r.cfg.Pool, r.cfg.Queue)
	if err != nil {
		if r.stop.Err() == nil {
			r.log.Warn("partitionq: looking for new ticks failed", slog.Any("error", err))
		}
		return false
	}
	r.seenTick.Store(last)
	for _, s := range idle {
		s.mu.Lock()
		behind := s.lastTick == 0 || s.lastTick < last
		s.mu.Unlock()
		if behind {
			return true
		}
	}
	return false
}

func (r *Runner) newBatch(s *slotRun, info engine.BatchInfo) *batchRun {
	b := &batchRun{s: s, info: info, out: parked.NewOutcome(s.info), keys: map[string]*keyState{}, done: make(chan struct{})}
	if r.cfg.HandleRun != nil {
		b.lanes = lanes.New(r.cfg.Concurrency, r.cfg.MaxRun, func(_ string, its []item) { r.handleRunInBatch(b, its) })
	} else {
		b.lanes = lanes.New(r.cfg.Concurrency, eventRunMax, func(_ string, its []item) { r.handleEventsInBatch(b, its) })
	}
	return b
}

// load reads, for slots taken since the last look, what the engine says of
// their blocked keys (one query for all of them), and where their
// consumers stand: a slot level with the queue's newest tick, without an
// open batch, starts cold, in the cohort, so that a worker that takes many
// idle slots does not open a batch for each of them (ten thousand a second
// at N = 256 and 10 ms ticks) until each has found itself empty. A slot
// behind opens its own batches from the start (a backlog has events for
// every slot: the probe's read would read them all for nothing), and one
// with an open batch opens it again first (its recorded progress resumes
// it).
func (r *Runner) load(slots []*slotRun) error {
	var fresh []*slotRun
	var infos []parked.Slot
	for _, s := range slots {
		s.mu.Lock()
		if !s.loaded {
			fresh = append(fresh, s)
			infos = append(infos, s.info)
		}
		s.mu.Unlock()
	}
	if len(fresh) == 0 {
		return nil
	}
	for _, s := range fresh {
		s.waitRuns()
	}
	var keys map[int]map[string]bool
	if r.cfg.Policy == Pause {
		var err error
		if keys, err = parked.ParkedKeys(r.stop, r.cfg.Pool, r.cfg.Eng, infos); err != nil {
			return err
		}
	}
	pos, err := r.cfg.Eng.IdlePositions(r.stop, r.cfg.Pool, r.cfg.Queue, consumersOf(fresh))
	if err != nil {
		return err
	}
	newest, err := r.cfg.Eng.LastTick(r.stop, r.cfg.Pool, r.cfg.Queue)
	if err != nil {
		return err
	}
	anyBlocked := false
	for i, s := range fresh {
		var ks []string
		for k := range keys[s.slot] {
			ks = append(ks, k)
		}
		s.markBlocked(ks)
		anyBlocked = anyBlocked || len(ks) > 0
		s.mu.Lock()
		s.loaded = true
		if pos[i] > 0 && pos[i] >= newest && s.pos == 0 && s.lastTick == 0 && s.batch == nil {
			s.pos, s.lastTick, s.cold = pos[i], pos[i], true
		}
		s.mu.Unlock()
	}
	if anyBlocked {
		signal(r.headWake)
	}
	return nil
}

// read reads the events of batches that cover the same ticks, with one
// scan, and hands each to its slot's lanes. A slot that cannot keep up
// leaves the shared read and reads the rest alone (a read of its own takes
// the batch over); a read cut short by a lost connection resumes after the
// last event it handed out. A batch whose events could not all be handed
// out (the slot was lost, the worker stops) is marked incomplete: it is not
// finished.
func (r *Runner) read(group []*batchRun, cands []*slotRun, after int64) {
	id := r.readSeq.Add(1)
	for _, b := range group {
		b.reader.Store(id)
	}
	mine := func(b *batchRun) bool { return b.reader.Load() == id }
	complete := false
	defer func() {
		for _, b := range group {
			if mine(b) {
				if !complete || !b.s.taking() {
					b.incomplete.Store(true)
				}
				b.readDone.Store(true)
				r.maybeEnd(b)
			}
		}
	}()
	backoff := 100 * time.Millisecond
	seen := map[int]bool{} // candidates with events (cohort reads)
	for r.stop.Err() == nil {
		live := group[:0:0]
		for _, b := range group {
			if b.s.taking() && mine(b) {
				live = append(live, b)
			}
		}
		if len(live) == 0 {
			return
		}
		done, err := r.readOnce(id, live, cands, seen, after)
		if err == nil {
			complete = done
			if done && len(cands) > 0 {
				r.probed(cands, seen, group[0].info.PrevTick, group[0].info.CurTick, true)
			}
			return
		}
		if errors.Is(err, engine.ErrBatchSQL) && len(live) > 1 {
			r.log.Warn("partitionq: the engine's batch query has an unknown shape: reading each slot alone", slog.Any("error", err))
			for _, b := range live {
				r.detach(b)
			}
			return
		}
		if r.stop.Err() != nil {
			return
		}
		r.log.Warn("partitionq: reading a batch failed; resuming", slog.Int64("batch", live[0].info.ID), slog.Any("error", err))
		sleep(r.stop, backoff)
		backoff = min(2*backoff, 5*time.Second)
		for _, b := range live {
			after = max(after, b.lastID.Load())
		}
	}
}

// letGo ends the part of the read id in batch b, incomplete: its slot is
// being handed over. Only the read's own goroutine calls it, between
// chunks, so no event of b is handed out after it.
func (r *Runner) letGo(b *batchRun) {
	b.reader.Store(0)
	b.incomplete.Store(true)
	b.readDone.Store(true)
	r.maybeEnd(b)
}

// detach moves a batch out of a shared read into a read of its own, from
// its last event on.
func (r *Runner) detach(b *batchRun) {
	b.reader.Store(0)
	r.wg.Add(1)
	go func() { defer r.wg.Done(); r.read([]*batchRun{b}, nil, b.lastID.Load()) }()
}

// readOnce runs one read transaction over group, from after on; done
// reports that every event was handed out.
func (r *Runner) readOnce(id int64, group []*batchRun, cands []*slotRun, seen map[int]bool, after int64) (done bool, err error) {
	select {
	case r.readerSem <- struct{}{}:
	case <-r.stop.Done():
		return false, nil
	}
	defer func() { <-r.readerSem }()
	ctx := r.stop
	tx, err := r.cfg.Pool.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer tx.Rollback(context.Background()) // read only
	spec := engine.ReadSpec{Batch: group[0].info.ID, Sub: group[0].s.info.SubID, N: r.cfg.N, AfterID: after, Owners: r.cfg.ParentSubs,
		SQL: r.takePeeked(group[0].info.ID)}
	bySlot := make(map[int]int, len(group)) // slot -> its index in group
	for i, b := range group {
		spec.Subs = append(spec.Subs, b.s.info.SubID)
		spec.Slots = append(spec.Slots, b.s.slot)
		bySlot[b.s.slot] = i
	}
	takes := make([]bool, len(group))
	cand := make(map[int]bool, len(cands))
	for _, s := range cands { // riding along: only whether they have events
		spec.Subs = append(spec.Subs, s.info.SubID)
		spec.Slots = append(spec.Slots, s.slot)
		cand[s.slot] = true
	}
	cur, evs, err := r.cfg.Eng.OpenRead(ctx, tx, spec, r.cfg.ChunkSize)
	if err != nil {
		return false, err
	}
	limit := int64(2 * r.cfg.ChunkSize)
	for len(evs) > 0 {
		// Whether each slot takes work, once a chunk: a slot that stops
		// taking meanwhile has its chunk's events handed out all the same,
		// and its lanes start none of them (handleEventsInBatch).
		for i, b := range group {
			takes[i] = b.reader.Load() == id && b.s.taking()
		}
		for i := range evs {
			ev := &evs[i] // the lanes hold it in the chunk: an event is not copied on its way
			if j, ok := bySlot[ev.Slot]; ok && group[j].reader.Load() == id {
				if takes[j] {
					group[j].add(ev)
				}
			} else if cand[ev.Slot] {
				seen[ev.Slot] = true
			}
		}
		for _, b := range group {
			if b.reader.Load() == id {
				b.flushAdds()
			}
		}
		if r.stop.Err() != nil {
			return false, nil
		}
		for _, b := range group { // a slot being handed over leaves the read: its batch ends here, incomplete
			if b.reader.Load() == id && !b.s.taking() {
				r.letGo(b)
			}
		}
		// Flow control: wait for the lanes to make room. In a shared read a
		// slot that does not make room soon, while another slot of the read
		// has run out of events and waits for more, leaves it (its events
		// are read again by a read of its own, after its last one). While
		// every slot has work the read is only ahead of the handlers: it
		// waits, and reads once.
		for _, b := range group {
			for b.reader.Load() == id && b.pending.Load() >= limit {
				if b.waitBelow(r.stop, limit, len(group) > 1) {
					break
				}
				if starving(group, id, b) {
					r.detach(b)
					break
				}
			}
		}
		if evs, err = cur.Next(ctx, r.cfg.ChunkSize); err != nil {
			return false, err
		}
	}
	return true, tx.Commit(ctx)
}

// starving reports whether a slot of the shared read id other than b has
// no event pending: it waits for events that b holds up.
func starving(group []*batchRun, id int64, b *batchRun) bool {
	for _, o := range group {
		if o != b && o.reader.Load() == id && o.s.active() && !o.ending.Load() && o.pending.Load() == 0 {
			return true
		}
	}
	return false
}

// waitBelow waits until fewer than limit events of the batch are pending;
// with short, it gives up after a moment and reports false.
func (b *batchRun) waitBelow(ctx context.Context, limit int64, short bool) bool {
	deadline := time.Now().Add(50 * time.Millisecond)
	for b.pending.Load() >= limit {
		if ctx.Err() != nil || !b.s.taking() {
			return true
		}
		if short && time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

// add takes one event of the batch for its key's lane (or skips it, when
// a previous owner resolved it); flushAdds hands the chunk's events over.
func (b *batchRun) add(ev *engine.SlotEvent) {
	b.readLast = ev.ID
	b.readN++
	resolved := b.skip.Has(ev.ID)
	if b.track != nil {
		b.trackIDs = append(b.trackIDs, ev.ID)
		b.trackDone = append(b.trackDone, resolved)
	}
	if resolved {
		b.s.stats.Resumed.Add(1)
		return
	}
	ks := b.keys[ev.Key]
	if ks == nil {
		ks = &keyState{blocked: b.s.r.cfg.Policy == Pause && b.s.isBlocked(ev.Key)}
		b.keys[ev.Key] = ks
	}
	b.addKeys = append(b.addKeys, ev.Key)
	b.addItems = append(b.addItems, item{ev: ev, ks: ks})
}

// flushAdds hands the events add took from the chunk read to the lanes,
// all at once (a run takes what the chunk holds of its key), after the
// counters and the progress tracker are told of them.
func (b *batchRun) flushAdds() {
	if b.readN == 0 {
		return
	}
	b.lastID.Store(b.readLast)
	b.events.Add(b.readN)
	b.readN = 0
	if len(b.trackIDs) > 0 {
		b.track.AddAll(b.trackIDs, b.trackDone)
		b.trackIDs, b.trackDone = b.trackIDs[:0], b.trackDone[:0]
	}
	if len(b.addKeys) == 0 {
		return
	}
	b.pending.Add(int64(len(b.addKeys)))
	b.lanes.AddAll(b.addKeys, b.addItems)
	clear(b.addItems) // the lanes hold them now
	b.addKeys, b.addItems = b.addKeys[:0], b.addItems[:0]
}

// eventRunMax is the most events of one key a lane hands a per-event
// handler one after another (one call each) before the key's turn ends:
// the slot's limits are taken once for them (a place in its concurrency,
// the key), which is most of what a quick handler's event costs beside
// the handler.
const eventRunMax = 16

// handleEventsInBatch handles a run of consecutive events of one key of a
// batch, one handler call each, or parks them behind their key's blocked
// head: an event that fails blocks the key (pause), and its later events
// of the run are parked behind it.
func (r *Runner) handleEventsInBatch(b *batchRun, its []item) {
	n := int64(len(its))
	defer func() {
		if b.pending.Add(-n) == 0 {
			r.maybeEnd(b)
		}
	}()
	if its[0].ks.blocked { // one key: one keyState
		r.parkAll(b, its)
		return
	}
	if r.stop.Err() != nil || b.s.leaving.Load() {
		b.incomplete.Store(true)
		return
	}
	first := its[0].ev
	g, now, err := b.s.enter(first.Key, first.ID)
	defer g.leave()
	if err != nil {
		b.incomplete.Store(true)
		return
	}
	for i, it := range its {
		if it.ks.blocked {
			r.parkAll(b, its[i:])
			return
		}
		if i > 0 {
			var ok bool
			if now, ok = b.s.activeNow(); !ok || r.stop.Err() != nil || b.s.leaving.Load() {
				b.incomplete.Store(true)
				return
			}
		}
		ev := it.ev
		attempt := int(ev.Retry) + 1
		res, aborted := b.s.callHeld(now, Call{Event: ev.Event, N: r.cfg.N, Slot: b.s.slot, Epoch: b.s.epoch, Batch: b.info.ID, Attempt: attempt})
		if aborted {
			b.incomplete.Store(true)
			return
		}
		if res.Err != nil {
			r.failedInBatch(b, it, res, attempt)
			continue
		}
		b.s.handled.Add(1)
		if b.track != nil {
			b.track.Resolve(ev.ID)
			signal(r.flushWake)
		}
	}
}

// parkAll parks events of a blocked key behind its head. A waiting event
// is not a failure: its ev_retry is kept (H1).
func (r *Runner) parkAll(b *batchRun, its []item) {
	for _, it := range its {
		b.s.stats.Parked.Add(1)
		b.out.Wait(it.ev.Event)
	}
	r.parkedInBatch(b)
}

// handleRunInBatch hands a run of consecutive events of one key of a batch
// to the run handler, or parks them behind their key's blocked head. Of a
// run that fails at event i, the events before it are done, event i's
// failure is handled as handleInBatch's, and the events after it are
// parked behind it (pause) or go on in a run of their own (retry-later).
func (r *Runner) handleRunInBatch(b *batchRun, its []item) {
	n := int64(len(its))
	defer func() {
		if b.pending.Add(-n) == 0 {
			r.maybeEnd(b)
		}
	}()
	for len(its) > 0 {
		if its[0].ks.blocked { // one key: one keyState
			r.parkAll(b, its)
			return
		}
		if r.stop.Err() != nil || !b.s.taking() {
			b.incomplete.Store(true)
			return
		}
		c := RunCall{Events: make([]engine.Event, len(its)), Attempts: make([]int, len(its)), N: r.cfg.N, Slot: b.s.slot,
			Epoch: b.s.epoch, Batch: b.info.ID}
		for i, it := range its {
			c.Events[i], c.Attempts[i] = it.ev.Event, int(it.ev.Retry)+1
		}
		res, aborted := b.s.callRun(c)
		if aborted {
			b.incomplete.Store(true)
			return
		}
		b.s.handled.Add(int64(res.Done))
		if b.track != nil && res.Done > 0 {
			for _, it := range its[:res.Done] {
				b.track.Resolve(it.ev.ID)
			}
			signal(r.flushWake)
		}
		if res.Done == len(its) {
			return
		}
		r.failedInBatch(b, its[res.Done], res.Failed, c.Attempts[res.Done])
		its = its[res.Done+1:]
	}
}

// failedInBatch applies the policy to event it of a batch, whose attempt
// failed with res.
func (r *Runner) failedInBatch(b *batchRun, it item, res Result, attempt int) {
	ev := it.ev
	b.s.failed.Add(1)
	defer r.parkedInBatch(b)
	if dead, reason := r.exhausted(res, attempt); dead {
		r.log.Warn("partitionq: event dead-lettered", slog.Int("slot", b.s.slot), slog.String("key", ev.Key),
			slog.Int64("event_id", ev.ID), slog.Int("attempt", attempt), slog.String("reason", reason))
		b.out.Dead(parked.DeadLetter(b.s.info, ev.Event, attempt, errText(res.Err), reason, "worker"))
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
		b.out.Fail(ev.Event, attempt, errText(res.Err), delay)
	case Skip:
		b.out.RetryAt(ev.Event, attempt, time.Now().Add(delay))
	}
}

// parkedInBatch wakes the progress flush, which writes what the batch
// parked or gave up before the batch ends (progress.go).
func (r *Runner) parkedInBatch(b *batchRun) {
	if b.track != nil {
		signal(r.flushWake)
	}
}

// maybeEnd ends a batch whose events are all handed out and done: it is
// finished, or (a lost slot, a stopping worker) left open for the next owner.
func (r *Runner) maybeEnd(b *batchRun) {
	if !b.readDone.Load() || b.pending.Load() != 0 || b.ending.Swap(true) {
		return
	}
	if b.incomplete.Load() || !b.s.active() {
		r.abandon(b)
		return
	}
	select {
	case r.finishQ <- b:
	default:
		// The queue is full only when very many slots end at once: finish
		// this one on its own.
		r.wg.Add(1)
		go func() { defer r.wg.Done(); r.finish([]*batchRun{b}) }()
	}
}

// abandon leaves a batch open: the slot's next owner (maybe this worker,
// later) gets it again and skips what the recorded progress says is done.
// It may be called from a lane of the batch, so it waits for the lanes on a
// goroutine of its own.
//
// When the slot is still owned (the worker stops, or hands the slot over)
// the batch's progress is recorded first, what its last handler runs
// resolved included: the next owner repeats none of it.
func (r *Runner) abandon(b *batchRun) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		b.lanes.Wait()
		if b.s.active() {
			if r.stop.Err() == nil && !b.s.leaving.Load() {
				r.log.Info("partitionq: batch left open for the next owner", slog.Int("slot", b.s.slot), slog.Int64("batch", b.info.ID))
			}
			if b.track != nil {
				r.flush(context.WithoutCancel(r.stop))
			}
		}
		r.endBatch(b)
	}()
}

// endBatch makes the slot idle.
func (r *Runner) endBatch(b *batchRun) {
	s := b.s
	s.mu.Lock()
	if s.batch == b {
		s.batch = nil
	}
	s.mu.Unlock()
	close(b.done)
	signal(r.wake)
}

// finishLoop finishes the batches that are done, many slots in one
// transaction.
func (r *Runner) finishLoop() {
	for b := range r.finishQ {
		bs := []*batchRun{b}
	more:
		for len(bs) < 256 {
			select {
			case b, ok := <-r.finishQ:
				if !ok {
					break more
				}
				bs = append(bs, b)
			default:
				break more
			}
		}
		r.finish(bs)
	}
}

// finish writes what the batches leave (parked events, failures, timed
// retries, dead letters), finishes them in the engine and resets their
// progress, in one transaction that first checks each slot is still owned
// at its epoch (a slot taken over meanwhile is left out, and stops here).
func (r *Runner) finish(bs []*batchRun) {
	for _, b := range bs {
		b.out.Close() // a part of it a flush is writing is settled first
	}
	for attempt := 0; len(bs) > 0; attempt++ {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.stop), 30*time.Second)
		counts := make([]counts, len(bs))
		for i, b := range bs {
			counts[i] = b.s.takeCounts()
		}
		done, lost, err := r.finishTx(ctx, bs, counts)
		cancel()
		for i, b := range bs {
			if !contains(done, b) {
				b.s.putCounts(counts[i])
			}
		}
		for _, b := range lost {
			r.loseRun(b.s, "another worker took the slot over")
			r.endBatch(b)
		}
		for _, b := range done {
			r.finished(b)
		}
		if err == nil {
			return
		}
		// Not committed, or not known to be: the batches still open are
		// finished again (the outcome is kept), the others did commit.
		left := bs[:0:0]
		for _, b := range bs {
			if !contains(done, b) && !contains(lost, b) {
				left = append(left, b)
			}
		}
		if open, oerr := r.openOf(left); oerr == nil {
			still := left[:0:0]
			for _, b := range left {
				if open[b.info.ID] {
					still = append(still, b)
				} else {
					r.finished(b)
				}
			}
			left = still
		}
		bs = left[:0:0]
		for _, b := range left {
			if b.s.active() {
				bs = append(bs, b)
			} else {
				r.endBatch(b)
			}
		}
		if len(bs) > 0 {
			r.log.Warn("partitionq: finishing batches failed; retrying", slog.Int("batches", len(bs)), slog.Any("error", err))
			sleep(r.hard, min(time.Duration(attempt+1)*200*time.Millisecond, 5*time.Second))
			if r.hard.Err() != nil {
				for _, b := range bs {
					r.endBatch(b)
				}
				return
			}
		}
	}
}

func contains(bs []*batchRun, b *batchRun) bool {
	for _, x := range bs {
		if x == b {
			return true
		}
	}
	return false
}

func (r *Runner) openOf(bs []*batchRun) (map[int64]bool, error) {
	ids := make([]int64, len(bs))
	for i, b := range bs {
		ids[i] = b.info.ID
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.stop), 10*time.Second)
	defer cancel()
	return r.cfg.Eng.OpenBatches(ctx, r.cfg.Pool, ids)
}

func (r *Runner) finishTx(ctx context.Context, bs []*batchRun, cs []counts) (done, lost []*batchRun, err error) {
	slots := make([]int, len(bs))
	epochs := make([]int64, len(bs))
	for i, b := range bs {
		slots[i], epochs[i] = b.s.slot, b.s.epoch
	}
	var handled, failed []int64
	err = pgx.BeginFunc(ctx, r.cfg.Pool, func(tx pgx.Tx) error {
		owned, err := r.leaseOwned(ctx, tx, slots, epochs)
		if err != nil {
			return err
		}
		var ids []int64
		var ps []int32
		done, lost = nil, nil
		for i, b := range bs {
			if !owned[b.s.slot] {
				lost = append(lost, b)
				continue
			}
			if err := b.out.Write(ctx, tx, r.cfg.Eng); err != nil {
				return err
			}
			ids = append(ids, b.info.ID)
			ps = append(ps, int32(b.s.slot))
			handled = append(handled, cs[i].handled)
			failed = append(failed, cs[i].failed)
			done = append(done, b)
		}
		if _, err := r.cfg.Eng.FinishBatches(ctx, tx, ids); err != nil {
			return err
		}
		return slotstats.Finish(ctx, tx, r.cfg.Queue, r.cfg.Group, r.cfg.Generation, ps, ids, handled, failed)
	})
	if err != nil {
		return nil, nil, err
	}
	return done, lost, nil
}

// finished records a committed finish.
func (r *Runner) finished(b *batchRun) {
	s := b.s
	retry, dead := b.out.Counts()
	if r.cfg.Policy == Pause {
		s.markBlocked(b.out.ParkedKeys())
	}
	s.stats.Batches.Add(1)
	s.stats.LastBatch.Store(time.Now().UnixNano())
	s.stats.DeadLettered.Add(int64(dead))
	s.mu.Lock()
	s.lastTick, s.pos = b.info.CurTick, b.info.CurTick
	s.cold = b.events.Load() == 0
	s.small = !s.cold && b.info.CurSeq-b.info.PrevSeq <= peekMax
	s.mu.Unlock()
	r.trace("batch finished", "slot", s.slot, "batch", b.info.ID, "cur", b.info.CurTick, "events", b.events.Load())
	b.lanes.Wait()
	if r.cfg.Policy == Pause && retry > 0 {
		signal(r.headWake) // new parked events: failed heads to schedule, or waiting events due now
	}
	r.endBatch(b)
}
