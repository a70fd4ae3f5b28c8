package runner

import (
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/partitionq/partitionq/partitionq/internal/engine"
	"github.com/partitionq/partitionq/partitionq/internal/lease"
	"github.com/partitionq/partitionq/partitionq/internal/store"
)

// Opening batches, at a cost that follows the slots with events, not N.
//
// Each slot knows two positions: pos, where its engine consumer stands
// (its last finished tick), and lastTick, how far it has read: a slot whose
// own events the shared reads showed to be none between the two is at
// lastTick as far as its events go, and its consumer is moved there
// without a batch (engine.Advance) when that is needed: before it opens a
// batch, before it hands off at a resize's cutover, and at least once a
// second (idleAdvance), so that it never holds back the queue's table
// rotation and its lag, as status and the metrics report it, stays within
// about idleAdvance plus one tick.
//
// Idle slots that are cold (their last batch, or the last read that looked
// at them, had no event of theirs) form a cohort: only one of them, the
// probe (the one that has read the least), opens a batch, and its read looks
// at the others' events too (their slot numbers and retry owners are in the
// read). The others open nothing: those the read found events for are warm
// and open their own batches at once; the rest move on to the end of the
// probe's batch without one. Per tick that is one batch for the cohort plus
// one per slot with events; a slot with events in every tick is never cold
// and opens a batch per tick as before; a slot behind takes every tick it is
// behind by as one batch (engine.NextBatches), the probe too.

// idleAdvance is the longest a skipped slot's consumer stays behind how far
// it has read.
const idleAdvance = time.Second

// cohort is the idle cold slots: the probe opens a batch, the candidates
// ride on its read.
type cohort struct {
	at    int64
	probe *slotRun
	cands []*slotRun
}

// openBatches opens the next batch of the idle slots in one transaction,
// and starts reading them: one read for each set of batches that cover the
// same ticks. It reports whether to look again at once.
//
// During a resize, the transaction also keeps the old generation's slots
// at or before the cutover tick: it reads the resize after opening (so a
// resize committed after the opens' ticks were read cannot be missed:
// those ticks do not see it), registers the new slots at the cutover when
// its tick has just appeared, and undoes and reopens, one tick at a time,
// a batch that would pass it (engine.BoundBatches, ENGINE.md Z3). A slot
// that stands at the cutover is handed off. A new slot opens nothing
// before its parent slots are handed off.
func (r *Runner) openBatches() bool {
	idle := r.idleSlots()
	if len(idle) == 0 {
		return false
	}
	if r.cfg.Parent != 0 {
		var err error
		if idle, err = r.parentsDone(idle); err != nil {
			if r.stop.Err() == nil {
				r.log.Warn("partitionq: reading whether the parent slots are handed off failed", slog.Any("error", err))
				sleep(r.stop, 200*time.Millisecond)
			}
			return r.stop.Err() == nil
		}
		if len(idle) == 0 {
			return false
		}
	}
	if err := r.load(idle); err != nil {
		if r.stop.Err() == nil {
			r.log.Warn("partitionq: reading the state of new slots failed", slog.Any("error", err))
			sleep(r.stop, 200*time.Millisecond)
		}
		return r.stop.Err() == nil
	}
	seen := r.seenTick.Load() // before the batches are opened
	direct, cohorts := r.plan(idle, seen, r.cutover.Load())

	// What to open: direct slots (each its own batch, merged when behind)
	// and the cohorts' probes (one tick); slots to move first: direct ones
	// whose consumer is behind how far they have read, and probes.
	var move []*slotRun
	for _, s := range direct {
		if s.snapshotPos() < s.snapshotLast() {
			move = append(move, s)
		}
	}
	for _, c := range cohorts {
		if c.probe.snapshotPos() < c.at {
			move = append(move, c.probe)
		}
	}
	var infos, probeInfos []engine.BatchInfo
	var cutover int64
	var atCutover []*slotRun
	var moved []bool
	var movedTo []int64
	err := pgx.BeginFunc(r.stop, r.cfg.Pool, func(tx pgx.Tx) error {
		var err error
		if moved, movedTo, err = r.advance(tx, move); err != nil {
			return err
		}
		// One statement opens the direct slots' batches and the probes'.
		open := append([]*slotRun(nil), direct...)
		for _, c := range cohorts {
			open = append(open, c.probe)
		}
		all, err := r.cfg.Eng.NextBatches(r.stop, tx, r.cfg.Queue, consumersOf(open), r.cfg.BatchMaxEvents)
		if err != nil {
			return err
		}
		infos, probeInfos = all[:len(direct):len(direct)], all[len(direct):]
		if cutover, err = store.Cutover(r.stop, tx, r.cfg.Eng.Schema(), r.cfg.Queue, r.cfg.Group, r.cfg.N); err != nil || cutover == 0 {
			return err
		}
		if infos, err = r.cfg.Eng.BoundBatches(r.stop, tx, r.cfg.Queue, infos, cutover); err != nil {
			return err
		}
		if probeInfos, err = r.cfg.Eng.BoundBatches(r.stop, tx, r.cfg.Queue, probeInfos, cutover); err != nil {
			return err
		}
		// Every idle slot without a batch that has read up to the cutover
		// stands at it (moved there when it was skipped): it hands off.
		var still []string
		var stillRuns []*slotRun
		for i, b := range infos {
			if b.ID == 0 {
				still, stillRuns = append(still, b.Consumer), append(stillRuns, direct[i])
			}
		}
		for i, b := range probeInfos {
			if b.ID == 0 {
				still, stillRuns = append(still, b.Consumer), append(stillRuns, cohorts[i].probe)
			}
			for _, s := range cohorts[i].cands {
				if s.snapshotLast() == cutover {
					still, stillRuns = append(still, s.info.Consumer), append(stillRuns, s)
				}
			}
		}
		pos, err := r.cfg.Eng.Positions(r.stop, tx, r.cfg.Queue, still)
		if err != nil {
			return err
		}
		var lag []*slotRun
		var from []int64
		for i, p := range pos {
			if s := stillRuns[i]; p != cutover && s.snapshotLast() == cutover {
				lag, from = append(lag, s), append(from, p)
			}
		}
		if len(lag) > 0 { // read to the cutover, consumer behind it: move it there
			if err := r.fence(tx, lag); err != nil {
				return err
			}
			to := make([]int64, len(lag))
			for i := range to {
				to[i] = cutover
			}
			ok, err := r.cfg.Eng.Advance(r.stop, tx, r.cfg.Queue, consumersOf(lag), from, to)
			if err != nil {
				return err
			}
			for i, s := range lag {
				if ok[i] {
					for j, x := range stillRuns {
						if x == s {
							pos[j] = cutover
						}
					}
				}
			}
		}
		atCutover = atCutover[:0]
		for i, p := range pos {
			if p == cutover {
				atCutover = append(atCutover, stillRuns[i])
			}
		}
		return nil
	})
	if err != nil {
		if r.stop.Err() == nil {
			r.log.Warn("partitionq: opening batches failed; retrying", slog.Any("error", err))
			sleep(r.stop, 200*time.Millisecond)
		}
		return r.stop.Err() == nil
	}
	r.cutover.Store(cutover)
	for i, s := range move {
		r.trace("slot moved ahead", "slot", s.slot, "to", movedTo[i], "ok", moved[i])
		s.mu.Lock()
		if moved[i] {
			s.pos = movedTo[i]
		} else {
			s.pos, s.lastTick, s.cold = 0, 0, false // not where it was thought to be: open alone from wherever it is
		}
		s.mu.Unlock()
	}
	for _, s := range atCutover {
		s.mu.Lock()
		s.pos, s.lastTick = cutover, cutover
		s.mu.Unlock()
		r.startHandoff(s)
	}
	var opened []*batchRun
	note := func(s *slotRun, info engine.BatchInfo) {
		if info.ID == 0 {
			// No batch: the slot is level with the newest tick, which is at
			// least the one the last look saw (it was read before this
			// transaction), so polls wake it again only for a newer one.
			s.mu.Lock()
			s.lastTick = max(s.lastTick, seen)
			if cutover != 0 {
				// An old generation's slot has nothing of its own past the
				// cutover: were it thought level with a newer tick, its
				// consumer would be moved past the cutover (advance), and
				// a slot whose handoff failed could never hand off.
				s.lastTick = min(s.lastTick, cutover)
			}
			if s.lastTick == 0 {
				s.lastTick = -1 // known to be level, the tick not known; the next poll compares
			}
			s.mu.Unlock()
			return
		}
		r.trace("batch opened", "slot", s.slot, "batch", info.ID, "prev", info.PrevTick, "cur", info.CurTick)
		opened = append(opened, r.newBatch(s, info))
	}
	for i, info := range infos {
		note(direct[i], info)
	}
	type span struct{ prev, cur int64 }
	cands := map[span][]*slotRun{}
	for i, info := range probeInfos {
		note(cohorts[i].probe, info)
		if info.ID != 0 && info.PrevTick == cohorts[i].at {
			k := span{info.PrevTick, info.CurTick}
			cands[k] = append(cands[k], cohorts[i].cands...)
		}
	}
	if len(opened) == 0 {
		return false
	}
	if r.cfg.Progress {
		if err := r.loadProgress(opened); err != nil && r.stop.Err() == nil {
			r.log.Warn("partitionq: reading recorded progress failed; the batches run whole", slog.Any("error", err))
		}
	}
	for _, b := range opened { // published once complete: the flusher and the finisher read them
		b.s.mu.Lock()
		b.s.batch = b
		b.s.finished = b.done
		b.s.mu.Unlock()
	}
	// One read for the batches of each tick range, the candidates of the
	// cohorts probed in it riding along.
	groups := map[span][]*batchRun{}
	var order []span
	for _, b := range opened {
		k := span{b.info.PrevTick, b.info.CurTick}
		if groups[k] == nil {
			order = append(order, k)
		}
		groups[k] = append(groups[k], b)
	}
	for _, k := range order {
		g, c := groups[k], cands[k]
		if len(c) > 0 {
			r.trace("cohort read", "probe", g[0].s.slot, "prev", k.prev, "cur", k.cur, "cands", consumersOf(c))
		}
		r.wg.Add(1)
		go func() { defer r.wg.Done(); r.read(g, c, 0) }()
	}
	return false
}

// plan splits idle slots into those that open a batch of their own and
// the cohort of cold slots that ride on one probe's read: the cold slot
// that has read the least is the probe (its batch covers every tick the
// others still have to look at, and more: a cold slot ahead of it has seen
// nothing of its own in the ticks it is ahead by).
func (r *Runner) plan(idle []*slotRun, newest, cutover int64) (direct []*slotRun, cohorts []cohort) {
	var cold []*slotRun
	for _, s := range idle {
		s.mu.Lock()
		at, isCold, pos := s.lastTick, s.cold, s.pos
		s.mu.Unlock()
		if !isCold || at <= 0 || pos <= 0 || newest <= 0 || (cutover != 0 && at >= cutover) {
			direct = append(direct, s)
			continue
		}
		cold = append(cold, s)
	}
	if len(cold) < 2 {
		return append(direct, cold...), nil
	}
	p := 0
	for i, s := range cold {
		at, q := s.snapshotLast(), cold[p].snapshotLast()
		if at < q || (at == q && s.snapshotPos() == at && cold[p].snapshotPos() != q) {
			p = i
		}
	}
	c := cohort{at: cold[p].snapshotLast(), probe: cold[p]}
	c.cands = append(append(c.cands, cold[:p]...), cold[p+1:]...)
	return direct, []cohort{c}
}

// probed records what a completed read of a probe's batch ending at tick
// cur showed of its candidates: those with events (seen) open batches of
// their own next; the others have read up to cur, with nothing to handle.
func (r *Runner) probed(cands []*slotRun, seen map[int]bool, prev, cur int64) {
	warm := false
	for _, s := range cands {
		s.mu.Lock()
		switch {
		case seen[s.slot]:
			s.cold = false
			warm = true
		case s.lastTick >= prev && s.lastTick < cur && s.batch == nil:
			s.lastTick = cur // (prev, cur] has nothing of its own, nor had (its consumer, prev]
		}
		r.trace("probed", "slot", s.slot, "prev", prev, "cur", cur, "seen", seen[s.slot], "last", s.lastTick, "pos", s.pos)
		s.mu.Unlock()
	}
	if warm {
		signal(r.wake)
	}
}

// advance moves the consumers of slots whose reads went further than
// their consumers (slots skipped by cohort reads) to where they have read,
// fenced by their epochs; it reports which moved.
func (r *Runner) advance(tx pgx.Tx, ss []*slotRun) (ok []bool, to []int64, err error) {
	if len(ss) == 0 {
		return nil, nil, nil
	}
	if err := r.fence(tx, ss); err != nil {
		return nil, nil, err
	}
	from := make([]int64, len(ss))
	to = make([]int64, len(ss))
	cutover := r.cutover.Load()
	for i, s := range ss {
		s.mu.Lock()
		from[i], to[i] = s.pos, s.lastTick
		s.mu.Unlock()
		if cutover != 0 && to[i] > cutover {
			to[i] = max(cutover, from[i]) // never past a resize's cutover: the slot hands off there
		}
	}
	ok, err = r.cfg.Eng.Advance(r.stop, tx, r.cfg.Queue, consumersOf(ss), from, to)
	return ok, to, err
}

// fence checks, in tx, that the worker owns the slots at their epochs
// (holding their rows until tx ends): a consumer is moved only by its
// slot's owner.
func (r *Runner) fence(tx pgx.Tx, ss []*slotRun) error {
	slots, epochs := make([]int, len(ss)), make([]int64, len(ss))
	for i, s := range ss {
		if !s.active() {
			return lease.ErrNotOwner
		}
		slots[i], epochs[i] = s.slot, s.epoch
	}
	return lease.Fence(r.stop, tx, r.cfg.Queue, r.cfg.Group, r.cfg.N, slots, epochs)
}

// advanceIdle moves the consumers of idle slots that cohort reads skipped
// to where they have read: at most idleAdvance behind (see above), and
// before the slots are released.
func (r *Runner) advanceIdle() {
	var ss []*slotRun
	for _, s := range r.idleSlots() {
		if p, l := s.snapshotPos(), s.snapshotLast(); p > 0 && p < l {
			ss = append(ss, s)
		}
	}
	if len(ss) == 0 {
		return
	}
	var ok []bool
	var to []int64
	err := pgx.BeginFunc(r.hard, r.cfg.Pool, func(tx pgx.Tx) error {
		var err error
		ok, to, err = r.advance(tx, ss)
		return err
	})
	if err != nil {
		if r.stop.Err() == nil {
			r.log.Warn("partitionq: moving idle slots ahead failed", slog.Any("error", err))
		}
		return
	}
	for i, s := range ss {
		s.mu.Lock()
		if ok[i] {
			s.pos = max(s.pos, to[i])
		} else if s.batch == nil {
			s.pos, s.lastTick, s.cold = 0, 0, false
		}
		s.mu.Unlock()
	}
}

func consumersOf(ss []*slotRun) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.info.Consumer
	}
	return out
}

func (s *slotRun) snapshotPos() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pos
}

func (s *slotRun) snapshotLast() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastTick
}
