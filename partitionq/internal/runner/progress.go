package runner

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/partitionq/partitionq/partitionq/internal/db"
	"github.com/partitionq/partitionq/partitionq/internal/lease"
	"github.com/partitionq/partitionq/partitionq/internal/parked"
	"github.com/partitionq/partitionq/partitionq/internal/progress"
	"github.com/partitionq/partitionq/partitionq/internal/slotstats"
)

// Progress inside open batches lives in partitionq.slot_progress, one row
// per slot: the batch, a watermark and the resolved ids above it. A flush
// writes every slot's news since the last flush in one transaction (group
// commit), which first checks that each slot is still owned at its epoch;
// a flush of progress only commits without waiting for the WAL to reach
// disk (a server crash may lose the last such flushes: those events run
// again, nothing is lost). A flush that writes a batch's parked events,
// failure records or dead letters before the batch ends (a part) waits
// for it: once it commits, those events leave the batch's outcome and are
// resolved in its progress, so the batch's finish does not write them
// again, and a commit the server acknowledged and then lost in a crash
// lost them (TestEarlyParkedPartSurvivesACrashRestart).
//
// Drains of blocked keys resume the same way: a drain handles a run of
// parked events in one transaction, which resolves them when it commits;
// the same flushes record each handled event as done as it goes
// (partitionq.slot_done, batch 0), so that a drain cut short by a fault
// repeats only what was in flight and what the last flush had not written:
// the next drain resolves the recorded events without running them
// (parked.Drain). Before a drain's transaction resolves its events (and
// deletes their records), it settles (settleDrained): a flush records what
// it handled, so that even a drain whose own transaction was lost in a
// fault unnoticed, and went on handling, leaves every event it handled
// recorded; and from then on no flush writes a record of those events, so
// that no record outlives its event.

// drained records that a drain of slot s handled parked event id: the next
// flush records it as done.
func (r *Runner) drained(s *slotRun, id int64) {
	if !r.cfg.Progress {
		return
	}
	s.mu.Lock()
	s.drainedIDs = append(s.drainedIDs, id)
	s.mu.Unlock()
	signal(r.flushWake)
}

// settleDrained is a drain's parked.DrainHooks.Settle: the events done are
// recorded (one flush), and as they are about to be resolved, no flush may
// record them from now on.
func (r *Runner) settleDrained(s *slotRun, done []int64) {
	if len(done) == 0 || !r.cfg.Progress {
		return
	}
	r.flushMu.Lock() // a flush under way ends first
	defer r.flushMu.Unlock()
	// A fault that cut the drain short may have left the pool's idle
	// sessions dead too: each try drops one, so as many tries as the pool
	// has sessions, and one more, reach a live one. (Three tries were too
	// few: with more dead idle sessions than that, the handled events were
	// forgotten unrecorded, and ran again.)
	tries := int(r.cfg.Pool.Config().MaxConns) + 1
	for try := 0; try < tries; try++ {
		if r.flushLocked(r.stop) == nil || r.stop.Err() != nil {
			break
		}
	}
	gone := make(map[int64]bool, len(done))
	for _, id := range done {
		gone[id] = true
	}
	s.mu.Lock()
	kept := s.drainedIDs[:0]
	for _, id := range s.drainedIDs {
		if !gone[id] {
			kept = append(kept, id)
		}
	}
	s.drainedIDs = kept
	s.mu.Unlock()
}

func (r *Runner) leaseOwned(ctx context.Context, tx db.DB, slots []int, epochs []int64) (map[int]bool, error) {
	return lease.Owned(ctx, tx, r.cfg.Queue, r.cfg.Group, r.cfg.Generation, slots, epochs)
}

// loadProgress reads what previous owners recorded of the batches just
// opened: their progress rows, and the events whose exactly-once handler
// committed (partitionq.slot_done).
func (r *Runner) loadProgress(bs []*batchRun) error {
	slots := make([]int32, len(bs))
	ids := make([]int64, len(bs))
	for i, b := range bs {
		slots[i], ids[i] = int32(b.s.slot), b.info.ID
	}
	var sets map[int]progress.Set
	err := pgx.BeginFunc(r.stop, r.cfg.Pool, func(tx pgx.Tx) error {
		var unreadable []int
		var err error
		sets, unreadable, err = slotstats.LoadProgress(r.stop, tx, r.cfg.Queue, r.cfg.Group, r.cfg.Generation, slots, ids)
		for _, s := range unreadable {
			r.log.Warn("partitionq: recorded progress of a batch is unreadable; running the batch whole", slog.Int("slot", s))
		}
		return err
	})
	for _, b := range bs {
		b.skip = sets[b.s.slot]
		b.track = progress.NewTracker(b.skip, r.cfg.ProgressMax)
		if n := b.skip.Len(); n > 0 || b.skip.Below > 0 {
			r.log.Info("partitionq: resuming a batch a previous owner left open", slog.Int("slot", b.s.slot),
				slog.Int64("batch", b.info.ID), slog.Int64("done_below", b.skip.Below), slog.Int("done_above", n))
		}
	}
	return err
}

// flushLoop flushes progress whenever there is news, at most once per
// FlushInterval, until stop.
func (r *Runner) flushLoop() {
	for {
		select {
		case <-r.stop.Done():
			return
		case <-r.flushWake:
		}
		r.flush(r.stop)
		sleep(r.stop, r.cfg.FlushInterval)
	}
}

// flush records the progress of every owned slot's open batch that changed,
// the slots' new counts and the events their drains handled, in one
// transaction.
func (r *Runner) flush(ctx context.Context) {
	r.flushMu.Lock()
	defer r.flushMu.Unlock()
	r.flushLocked(ctx)
}

// flushLocked is flush, with r.flushMu held; it returns the error of a
// flush that failed (it is logged, and retried at the next flush).
func (r *Runner) flushLocked(ctx context.Context) error {
	type row struct {
		s     *slotRun
		b     *batchRun
		set   progress.Set
		batch int64
		c     counts
		part  *parked.Part // written with the progress that resolves its events
		ids   []int64      // part's events
	}
	type drainedRow struct {
		s   *slotRun
		ids []int64
	}
	var rows []row
	var drained []drainedRow
	for _, s := range r.ownedSlots() {
		s.mu.Lock()
		b := s.batch
		if len(s.drainedIDs) > 0 {
			drained = append(drained, drainedRow{s: s, ids: s.drainedIDs})
			s.drainedIDs = nil
		}
		s.mu.Unlock()
		if b == nil || b.track == nil {
			continue
		}
		// What the batch parked or gave up so far is written now, with
		// the progress that records it resolved: a blocked key's drain need
		// not wait for the batch's slowest key, and a next owner of the
		// batch skips what is parked. Once committed, those events are
		// pinned: every later snapshot records them (a next owner that ran
		// them would park them twice). A part not committed goes back to
		// the outcome, unrecorded, for a later flush or the finish; one
		// that would pin more than the bound waits for the finish.
		var extra []int64
		pt := b.out.Take()
		if pt != nil {
			if extra = pt.IDs(); !b.track.Room(len(extra)) {
				pt.Settle(false)
				pt, extra = nil, nil
			}
		}
		set, changed := b.track.SnapshotWith(extra)
		if !changed {
			continue
		}
		rows = append(rows, row{s: s, b: b, set: set, batch: b.info.ID, c: s.takeCounts(), part: pt, ids: extra})
	}
	if len(rows) == 0 && len(drained) == 0 {
		return nil
	}
	n := len(rows)
	slots, epochs := make([]int, n), make([]int64, n)
	ps, batches, belows := make([]int32, n), make([]int64, n), make([]int64, n)
	dones := make([][]byte, n)
	hs, fs := make([]int64, n), make([]int64, n)
	for i, x := range rows {
		slots[i], epochs[i] = x.s.slot, x.s.epoch
		ps[i], batches[i], belows[i], dones[i] = int32(x.s.slot), x.batch, x.set.Below, x.set.Encode()
		hs[i], fs[i] = x.c.handled, x.c.failed
	}
	for _, d := range drained { // their slots' ownership is checked too
		slots, epochs = append(slots, d.s.slot), append(epochs, d.s.epoch)
	}
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	var owned map[int]bool
	var keep []bool
	withPart := false
	for _, x := range rows {
		withPart = withPart || x.part != nil
	}
	err := pgx.BeginFunc(tctx, r.cfg.Pool, func(tx pgx.Tx) error {
		if !withPart {
			if _, err := tx.Exec(tctx, `set local synchronous_commit = off`); err != nil {
				return err
			}
		}
		var err error
		if owned, err = r.leaseOwned(tctx, tx, slots, epochs); err != nil {
			return err
		}
		keep = make([]bool, n)
		for i, s := range slots[:n] {
			keep[i] = owned[s]
		}
		for i, x := range rows {
			if keep[i] && x.part != nil {
				if err := x.part.Write(tctx, tx, r.cfg.Eng); err != nil {
					return err
				}
			}
		}
		// The progress and the slots' rate buckets, in one round trip.
		batch := &pgx.Batch{}
		slotstats.QueueProgress(batch, r.cfg.Queue, r.cfg.Group, r.cfg.Generation, slotstats.Progress{Slots: ps, Batches: batches,
			Belows: belows, Dones: dones, Handled: hs, Failed: fs, Keep: keep})
		var kps []int32
		var khs, kfs []int64
		for i := range ps {
			if keep[i] {
				kps, khs, kfs = append(kps, ps[i]), append(khs, hs[i]), append(kfs, fs[i])
			}
		}
		slotstats.QueueRecord(batch, r.cfg.Queue, r.cfg.Group, r.cfg.Generation, kps, khs, kfs)
		var dslots []int32
		var dids []int64
		for _, d := range drained {
			if owned[d.s.slot] {
				for _, id := range d.ids {
					dslots, dids = append(dslots, int32(d.s.slot)), append(dids, id)
				}
			}
		}
		slotstats.QueueDrained(batch, r.cfg.Queue, r.cfg.Group, r.cfg.Generation, dslots, dids)
		return tx.SendBatch(tctx, batch).Close()
	})
	if err != nil {
		for _, x := range rows {
			x.s.putCounts(x.c)
			x.b.track.Touch()
			if x.part != nil {
				x.part.Settle(false)
			}
		}
		for _, d := range drained { // the next flush tries again
			d.s.mu.Lock()
			d.s.drainedIDs = append(d.ids, d.s.drainedIDs...)
			d.s.mu.Unlock()
		}
		if ctx.Err() == nil {
			r.log.Warn("partitionq: recording progress failed", slog.Any("error", err))
		}
		signal(r.flushWake) // try again
		return err
	}
	parkedNow := false
	for i, x := range rows {
		switch {
		case x.part != nil && keep[i]:
			x.b.track.ResolvePinned(x.ids)
			x.part.Settle(true)
			if r.cfg.Policy == Pause {
				x.s.markBlocked(x.part.Keys())
			}
			x.s.stats.DeadLettered.Add(int64(x.part.Dead()))
			parkedNow = true
			r.trace("parked events written before the batch's end", "slot", x.s.slot, "batch", x.batch, "events", len(x.ids))
		case x.part != nil:
			x.part.Settle(false)
		}
		if !owned[x.s.slot] {
			r.loseRun(x.s, "another worker took the slot over")
		}
	}
	if parkedNow && r.cfg.Policy == Pause {
		signal(r.headWake) // their heads may be due
	}
	for _, d := range drained {
		if !owned[d.s.slot] {
			r.loseRun(d.s, "another worker took the slot over")
		}
	}
	return nil
}
