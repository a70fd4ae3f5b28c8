package runner

import (
	"errors"
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
// at them, had no event of theirs), and outside a resize those whose last
// batch was small (a look can peek at the next one: at a low rate most
// slots with events have none in the next tick) form a cohort: only one of them, the
// probe (the one that has read the least), opens a batch, and the others'
// events in it are looked at (their slot numbers and retry owners): in the
// look's own transaction when the batch is small (peek: at most peekMax
// events, outside a resize), else by the probe's read. The others open
// nothing: those with events are warm and open their own batches, in the
// same transaction after a peek, else in the next look; the rest move on to
// the end of the probe's batch without one. A slot taken without an open
// batch starts cold (load). Per tick that is one batch for the cohort plus
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
// a batch that would pass it (engine.BoundBatches: a batch that merged
// ticks past the cutover would run events the new slots run too). A slot
// that stands at the cutover is handed off. A new slot opens nothing
// before its parent slots are handed off.
func (r *Runner) openBatches() bool {
	r.lookMu.Lock() // a handoff waits for the look that may be opening its slot's batch
	defer r.lookMu.Unlock()
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
	var woke peeked
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
		if cutover, err = store.Cutover(r.stop, tx, r.cfg.Eng.Schema(), r.cfg.Queue, r.cfg.Group, r.cfg.Generation); err != nil {
			return err
		}
		if cutover == 0 {
			woke, err = r.peek(tx, cohorts, probeInfos)
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
	if errors.Is(err, errResizeBegan) {
		r.trace("look undone: a resize began")
		return r.stop.Err() == nil
	}
	if err != nil {
		if r.stop.Err() == nil {
			r.log.Warn("partitionq: opening batches failed; retrying", slog.Any("error", err))
			sleep(r.stop, 200*time.Millisecond)
		}
		return r.stop.Err() == nil
	}
	r.cutover.Store(cutover)
	r.movedAhead(move, moved, movedTo)
	r.movedAhead(woke.moved, woke.ok, woke.to)
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
		if info.ID == 0 || info.PrevTick != cohorts[i].at {
			continue
		}
		if i >= len(woke.done) || !woke.done[i] { // not peeked at (a resize, a large batch): the candidates ride on its read
			k := span{info.PrevTick, info.CurTick}
			cands[k] = append(cands[k], cohorts[i].cands...)
			continue
		}
		r.probed(cohorts[i].cands, woke.seen, info.PrevTick, info.CurTick, false)
	}
	for i, s := range woke.warm {
		note(s, woke.infos[i])
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
		at, isCold, pos := s.lastTick, s.cold || (s.small && cutover == 0), s.pos
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
// their own next (the look wakes again for them when wake is set; a peek
// has opened them already); the others have read up to cur, with nothing
// to handle.
func (r *Runner) probed(cands []*slotRun, seen map[int]bool, prev, cur int64, wake bool) {
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
	if warm && wake {
		signal(r.wake)
	}
}

// peekMax is the most events of the queue (its sequence's count, which
// leaves out retried events) a probe's batch may span for the look to peek
// at it: larger ones are read with the candidates riding, so that a look
// stays short.
const peekMax = 5000

// peeked is what a look's peek at its cohorts' probe batches found and did.
type peeked struct {
	done  []bool       // by cohort: its probe's batch was peeked at
	seen  map[int]bool // candidates with events in it
	warm  []*slotRun   // of those, the ones whose batches were opened
	infos []engine.BatchInfo
	moved []*slotRun // candidates whose consumers were moved to where they have read first
	ok    []bool
	to    []int64
}

// peek looks, in the look's transaction, at which of each cohort's
// candidates have events in its probe's batch (one scan of a batch of at
// most about peekMax events, no event copied out), and opens at once the batches of the
// candidates it finds events for, so that an event of a cold slot waits
// for one look and one read, not for the probe's read and a second look.
// Outside a resize only (the caller's check): a candidate's batch is not
// bounded by a cutover.
func (r *Runner) peek(tx pgx.Tx, cohorts []cohort, probeInfos []engine.BatchInfo) (peeked, error) {
	p := peeked{done: make([]bool, len(cohorts)), seen: map[int]bool{}}
	var warm []*slotRun
	for i, c := range cohorts {
		info := probeInfos[i]
		if info.ID == 0 || info.PrevTick != c.at || len(c.cands) == 0 || info.CurSeq-info.PrevSeq > peekMax {
			continue
		}
		sql, err := r.cfg.Eng.BatchSQL(r.stop, tx, info.ID)
		if err != nil {
			return peeked{}, err
		}
		r.keepPeeked(info.ID, sql)
		spec := engine.ReadSpec{Batch: info.ID, Sub: c.probe.info.SubID, Subs: []int32{c.probe.info.SubID}, N: r.cfg.N, Owners: r.cfg.ParentSubs, SQL: sql}
		for _, s := range c.cands {
			spec.Subs = append(spec.Subs, s.info.SubID)
			spec.Slots = append(spec.Slots, s.slot)
		}
		slots, err := r.cfg.Eng.SlotsWithEvents(r.stop, tx, spec)
		if err != nil {
			return peeked{}, err
		}
		p.done[i] = true
		found := map[int]bool{}
		for _, s := range slots {
			found[s] = true
		}
		for _, s := range c.cands {
			if found[s.slot] {
				p.seen[s.slot] = true
				warm = append(warm, s)
			}
		}
	}
	if len(warm) == 0 {
		return p, nil
	}
	// A candidate's consumer may stand behind where it has read (cohort
	// reads skipped it there): moved first, as a direct slot's would be.
	var open []*slotRun
	for _, s := range warm {
		if s.snapshotPos() < s.snapshotLast() {
			p.moved = append(p.moved, s)
		} else {
			open = append(open, s)
		}
	}
	if len(p.moved) > 0 {
		var err error
		if p.ok, p.to, err = r.advance(tx, p.moved); err != nil {
			return peeked{}, err
		}
		for i, s := range p.moved {
			if p.ok[i] {
				open = append(open, s)
			}
		}
	}
	infos, err := r.cfg.Eng.NextBatches(r.stop, tx, r.cfg.Queue, consumersOf(open), r.cfg.BatchMaxEvents)
	if err != nil {
		return peeked{}, err
	}
	// These batches were opened after the resize was read: one that began
	// since (its cutover tick could be among their ticks) undoes the look,
	// which runs again at once, on the resize's path.
	if cutover, err := store.Cutover(r.stop, tx, r.cfg.Eng.Schema(), r.cfg.Queue, r.cfg.Group, r.cfg.Generation); err != nil {
		return peeked{}, err
	} else if cutover != 0 {
		return peeked{}, errResizeBegan
	}
	p.warm, p.infos = open, infos
	return p, nil
}

// keepPeeked keeps the engine's query of a batch a look peeked at, which
// the probe reads next: one batch_event_sql call a peek less (about half
// a millisecond of server time). A batch whose read never comes (its look
// undone) is forgotten with the rest once a few dozen are kept.
func (r *Runner) keepPeeked(batch int64, sql string) {
	r.peekedMu.Lock()
	defer r.peekedMu.Unlock()
	if r.peekedSQL == nil || len(r.peekedSQL) >= 64 {
		r.peekedSQL = map[int64]string{}
	}
	r.peekedSQL[batch] = sql
}

// takePeeked returns (and forgets) the query keepPeeked kept for batch.
func (r *Runner) takePeeked(batch int64) string {
	r.peekedMu.Lock()
	defer r.peekedMu.Unlock()
	sql := r.peekedSQL[batch]
	delete(r.peekedSQL, batch)
	return sql
}

// errResizeBegan undoes a look that opened batches after it read that no
// resize was in flight, and found one after.
var errResizeBegan = errors.New("a resize began during the look")

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

// movedAhead records what a committed advance (of ss, to to[i] where
// ok[i]) did to the slots' positions.
func (r *Runner) movedAhead(ss []*slotRun, ok []bool, to []int64) {
	for i, s := range ss {
		r.trace("slot moved ahead", "slot", s.slot, "to", to[i], "ok", ok[i])
		s.mu.Lock()
		if ok[i] {
			s.pos = to[i]
		} else {
			s.pos, s.lastTick, s.cold = 0, 0, false // not where it was thought to be: open alone from wherever it is
		}
		s.mu.Unlock()
	}
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
	return lease.Fence(r.stop, tx, r.cfg.Queue, r.cfg.Group, r.cfg.Generation, slots, epochs)
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
