package runner_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/partitionq/partitionq/partitionq/internal/engine"
	"github.com/partitionq/partitionq/partitionq/internal/parked"
	"github.com/partitionq/partitionq/partitionq/internal/runner"
)

// A runner that owns slots 1 and 3 of four runs exactly the events of the
// keys the server routes to those slots, each in its slot, every event
// once, a key's events in ev_id order; and finishes one batch per slot.
func TestABatchRunsExactlyItsSlotsKeys(t *testing.T) {
	t.Parallel()
	g := newGroup(t, 4)
	var keys []string
	for i := range 40 {
		keys = append(keys, fmt.Sprintf("k%d", i))
	}
	slotOf := g.slotsOf(keys)
	for s := range 4 { // the test means something only when every slot has keys
		if !slices.ContainsFunc(keys, func(k string) bool { return slotOf[k] == s }) {
			t.Fatalf("no key of slot %d among %v", s, keys)
		}
	}
	var c calls
	r := g.start(g.config([]int{1, 3}, runner.Pause, c.handler(nil)))
	ids := g.send(append(slices.Clone(keys), keys...)...) // two events per key
	want := map[int64]string{}
	for i, id := range ids {
		if k := keys[i%len(keys)]; slotOf[k] == 1 || slotOf[k] == 3 {
			want[id] = k
		}
	}
	g.waitRead(1, 3)

	got := map[int64]bool{}
	last := map[string]int64{}
	for _, x := range c.list() {
		if _, ok := want[x.id]; !ok {
			t.Errorf("event %d of key %s (slot %d) ran in slot %d: not an event of slots 1 and 3", x.id, x.key, slotOf[x.key], x.slot)
			continue
		}
		if x.slot != slotOf[x.key] {
			t.Errorf("event %d of key %s ran in slot %d, the server routes the key to slot %d", x.id, x.key, x.slot, slotOf[x.key])
		}
		if got[x.id] {
			t.Errorf("event %d ran twice", x.id)
		}
		got[x.id] = true
		if x.id < last[x.key] {
			t.Errorf("key %s: event %d ran after event %d", x.key, x.id, last[x.key])
		}
		last[x.key] = x.id
		if x.batch == 0 {
			t.Errorf("event %d ran with no batch", x.id)
		}
	}
	for id, k := range want {
		if !got[id] {
			t.Errorf("event %d of key %s (slot %d) did not run", id, k, slotOf[k])
		}
	}
	batches := map[int]map[int64]bool{1: {}, 3: {}}
	for _, x := range c.list() {
		batches[x.slot][x.batch] = true
	}
	for s, bs := range batches {
		if len(bs) != 1 {
			t.Errorf("slot %d ran the events of one tick in %d batches, want 1", s, len(bs))
		}
	}
	for _, s := range []int{1, 3} {
		if n := r.stats[s].Handled.Load(); n != countSlot(want, slotOf, s) {
			t.Errorf("slot %d's Stats.Handled = %d, want %d", s, n, countSlot(want, slotOf, s))
		}
	}
}

// Slots whose last batch had no event of theirs are cold: one of them
// probes the next ticks for all (docs/architecture.md, "Open"). A cold slot
// the probe's read finds events for still runs them, and a slot with
// nothing still follows the ticks; every event of every round runs once.
func TestColdSlotsEventsRun(t *testing.T) {
	t.Parallel()
	g := newGroup(t, 4)
	keyOf := g.keyPerSlot("c")
	slotOf := map[string]int{} // the server's routing of those keys
	for s, k := range keyOf {
		slotOf[k] = s
	}
	var c calls
	cfg := g.config([]int{0, 1, 2, 3}, runner.Pause, c.handler(nil))
	// Cold slots form a cohort only once the runner has looked at the
	// queue's newest tick (its poll): look often.
	cfg.PollInterval = time.Millisecond
	r := g.start(cfg)
	var sent []int64
	// Round 1 warms every slot; then each round has events of one slot
	// only, so the other three go cold and ride on a probe.
	rounds := [][]string{{keyOf[0], keyOf[1], keyOf[2], keyOf[3]}, {keyOf[2]}, {keyOf[2]}, {keyOf[0]}, {keyOf[3]}, {keyOf[1], keyOf[0]}}
	for i, round := range rounds {
		sent = append(sent, g.send(round...)...)
		n := int64(len(sent))
		waitFor(t, fmt.Sprintf("round %d ran (%d events in all)", i+1, n), func() bool { return r.handled() >= n })
	}
	ran := map[int64]int{}
	for _, x := range c.list() {
		ran[x.id]++
		if x.slot != slotOf[x.key] {
			t.Errorf("event %d of key %s ran in slot %d, want %d", x.id, x.key, x.slot, slotOf[x.key])
		}
	}
	for _, id := range sent {
		if ran[id] != 1 {
			t.Errorf("event %d ran %d times, want once", id, ran[id])
		}
	}
}

// A look peeks at a small probe batch for its candidates' events and opens
// the batches of those it finds in the same transaction: an event of a
// cold slot waits for one look and one read, not for a read of the probe's
// batch and then a second look (no cohort read rides on the probe's).
func TestAColdSlotsBatchOpensInTheProbesLook(t *testing.T) {
	t.Parallel()
	g := newGroup(t, 8)
	keyOf := g.keyPerSlot("p")
	var c calls
	cfg := g.config([]int{0, 1, 2, 3, 4, 5, 6, 7}, runner.Pause, c.handler(nil))
	cfg.PollInterval = time.Millisecond
	logs := &traceLog{}
	cfg.Log = slog.New(logs)
	r := g.start(cfg)
	var sent int64
	round := func(what string, ks ...string) {
		t.Helper()
		sent += int64(len(g.send(ks...)))
		waitFor(t, what, func() bool { return r.handled() >= sent })
	}
	// Every slot warm, then every slot but 0 cold: they form a cohort.
	round("a round with events for every slot", keyOf[0], keyOf[1], keyOf[2], keyOf[3], keyOf[4], keyOf[5], keyOf[6], keyOf[7])
	round("a round with events for slot 0", keyOf[0])
	round("a second round with events for slot 0", keyOf[0])
	mark := logs.len()
	round("a round with events for three cold slots", keyOf[0], keyOf[3], keyOf[5], keyOf[6])
	opened := map[int]bool{}
	for _, rec := range logs.since(mark) {
		switch rec.msg {
		case "partitionq: cohort read":
			t.Errorf("a cohort read rode on the probe's batch (%v): the look should have peeked at it", rec.attrs)
		case "partitionq: batch opened":
			opened[rec.slot] = true
		}
	}
	for _, s := range []int{3, 5, 6} {
		if !opened[s] {
			t.Errorf("slot %d ran an event without a batch opened for it in the round", s)
		}
	}
}

// traceLog keeps the runner's log records: their messages, slots and
// attributes.
type traceLog struct {
	mu   sync.Mutex
	recs []traceRec
}

type traceRec struct {
	msg   string
	slot  int
	attrs map[string]string
}

func (l *traceLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *traceLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *traceLog) WithGroup(string) slog.Handler            { return l }
func (l *traceLog) Handle(_ context.Context, r slog.Record) error {
	rec := traceRec{msg: r.Message, slot: -1, attrs: map[string]string{}}
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value.String()
		if a.Key == "slot" && a.Value.Kind() == slog.KindInt64 {
			rec.slot = int(a.Value.Int64())
		}
		return true
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, rec)
	return nil
}

func (l *traceLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.recs)
}

func (l *traceLog) since(i int) []traceRec {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]traceRec(nil), l.recs[i:]...)
}

// Under the pause policy a failing event sets its key aside: the key's
// later events in the batch, and in later batches, wait behind it in the
// retry queue, never run before it, while other keys flow. Once the head
// succeeds the key's events run in their order and nothing of it is left.
// (A key's next event may still wait one drain: the slot's set of blocked
// keys is a superset, shrunk after the drain commits.)
func TestPauseSetsAFailingKeyAside(t *testing.T) {
	t.Parallel()
	g := newGroup(t, 1)
	var healed atomic.Bool
	var c calls
	r := g.start(g.config([]int{0}, runner.Pause, c.handler(func(rc runner.Call) *runner.Result {
		if rc.Event.Key == "a" && !healed.Load() {
			return &runner.Result{Err: errors.New("a fails")}
		}
		return nil
	})))
	ids := g.send("a", "b", "a", "b", "a")
	a1, b1, a2, b2, a3 := ids[0], ids[1], ids[2], ids[3], ids[4]
	g.waitRead(0)
	if p := g.parkedIDs(0, "a"); !slices.Equal(p, []int64{a1, a2, a3}) {
		t.Fatalf("key a's parked events: %v, want its three [%d %d %d]", p, a1, a2, a3)
	}
	// A later batch: b's event runs, a's waits behind the head.
	later := g.send("a", "b")
	a4, b3 := later[0], later[1]
	g.waitRead(0)
	if p := g.parkedIDs(0, "a"); !slices.Equal(p, []int64{a1, a2, a3, a4}) {
		t.Fatalf("key a's parked events after a later batch: %v, want [%d %d %d %d]", p, a1, a2, a3, a4)
	}
	var bs []int64
	for _, x := range c.of("b") {
		bs = append(bs, x.id)
	}
	if !slices.Equal(bs, []int64{b1, b2, b3}) {
		t.Errorf("key b ran %v, want [%d %d %d]: other keys flow", bs, b1, b2, b3)
	}
	for _, x := range c.of("a") {
		if x.id != a1 {
			t.Fatalf("event %d of key a ran while its head %d was failing", x.id, a1)
		}
	}
	if n := r.stats[0].Parked.Load(); n < 3 {
		t.Errorf("Stats.Parked = %d, want at least 3 (a2, a3, a4)", n)
	}

	healed.Store(true)
	waitFor(t, "key a's events all ran", func() bool {
		as := c.of("a")
		return len(as) > 0 && as[len(as)-1].id == a4 && as[len(as)-1].ok
	})
	var order []int64
	for _, x := range c.of("a") {
		if x.ok {
			order = append(order, x.id)
		} else if x.id != a1 {
			t.Errorf("event %d of key a failed: only the head should", x.id)
		}
	}
	if !slices.Equal(order, []int64{a1, a2, a3, a4}) {
		t.Errorf("key a's events succeeded in the order %v, want [%d %d %d %d]", order, a1, a2, a3, a4)
	}
	if as := c.of("a"); as[0].attempt != 1 || as[len(as)-1].attempt != 1 {
		t.Errorf("attempts: the head's first %d, a4's %d; want 1 and 1 (a waiting event is not a failure)", as[0].attempt, as[len(as)-1].attempt)
	}
	waitFor(t, "key a has nothing parked", func() bool { return len(g.parkedIDs(0, "a")) == 0 })
}

// A key's events of one batch come to a per-event handler in one turn of
// its lane; one that fails in the middle of the turn blocks the key: the
// events before it are done, the ones after it are parked behind it
// without a call.
func TestAFailureInAKeysTurnParksTheRestOfIt(t *testing.T) {
	t.Parallel()
	g := newGroup(t, 1)
	var healed atomic.Bool
	var c calls
	g.start(g.config([]int{0}, runner.Pause, c.handler(func(rc runner.Call) *runner.Result {
		if rc.Event.Data == "a2" && !healed.Load() { // send numbers a key's payloads
			return &runner.Result{Err: errors.New("the second fails")}
		}
		return nil
	})))
	ids := g.send("a", "a", "a", "a")
	g.waitRead(0)
	if p := g.parkedIDs(0, "a"); !slices.Equal(p, ids[1:]) {
		t.Fatalf("key a's parked events: %v, want %v (the failed one and those after it)", p, ids[1:])
	}
	var ran []int64
	for _, x := range c.of("a") {
		ran = append(ran, x.id)
	}
	// The first done once, then the second: failed, maybe retried since.
	if len(ran) < 2 || ran[0] != ids[0] || slices.ContainsFunc(ran[1:], func(id int64) bool { return id != ids[1] }) {
		t.Fatalf("key a's calls: %v, want %d once, then %d (failing) only", ran, ids[0], ids[1])
	}
	healed.Store(true)
	waitFor(t, "key a's events all ran", func() bool {
		as := c.of("a")
		return len(as) > 0 && as[len(as)-1].id == ids[3] && as[len(as)-1].ok
	})
	var order []int64
	for _, x := range c.of("a") {
		if x.ok {
			order = append(order, x.id)
		}
	}
	if !slices.Equal(order, ids) {
		t.Errorf("key a's events succeeded in the order %v, want %v, each once", order, ids)
	}
}

// Under the skip policy a failing event becomes a timed retry of the
// engine and its key goes on: its later events run in the same batch.
func TestSkipLetsTheKeyGoOn(t *testing.T) {
	t.Parallel()
	g := newGroup(t, 1)
	var c calls
	cfg := g.config([]int{0}, runner.Skip, c.handler(func(rc runner.Call) *runner.Result {
		if rc.Event.Data == "a1" {
			return &runner.Result{Err: errors.New("a1 fails")}
		}
		return nil
	}))
	cfg.Backoff = func(int) time.Duration { return time.Hour }
	g.start(cfg)
	ids := g.send("a", "a", "a")
	g.waitRead(0)
	var ran []int64
	for _, x := range c.of("a") {
		ran = append(ran, x.id)
	}
	if !slices.Equal(ran, ids) {
		t.Errorf("key a ran %v, want all three %v", ran, ids)
	}
	hs, err := parked.Heads(g.ctx, g.pool, g.eng, []parked.Slot{g.slot(0)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 1 || hs[0].ID != ids[0] || hs[0].Parked() || hs[0].After.Before(time.Now().Add(30*time.Minute)) {
		t.Errorf("retry queue heads %+v; want a1 (%d) alone, a timed retry about an hour away", hs, ids[0])
	}
}

// countSlot counts the events of want whose key is in slot s.
func countSlot(want map[int64]string, slotOf map[string]int, s int) int64 {
	var n int64
	for _, k := range want {
		if slotOf[k] == s {
			n++
		}
	}
	return n
}

// Reads of a group of one slot and of a group of four on one connection
// (as a worker resizing from one slot reads both generations on its pool):
// each cursor's rows come through the same "fetch" statement, whose row
// description the driver caches per connection, so the slot column must
// have one type whatever N (it failed with "int4: invalid length: expected
// 4 bytes, got 8" on the second read, and the runner retried it forever).
func TestReadsOfOneSlotAndOfManyShareAConnection(t *testing.T) {
	t.Parallel()
	g1, g4 := newGroup(t, 1), newGroup(t, 4)
	g1.send("a")
	g4.send("a", "b", "c", "d", "e", "f", "g", "h")
	conn, err := g1.pool.Acquire(g1.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for _, g := range []*groupRig{g1, g4, g1} {
		err := pgx.BeginFunc(g.ctx, conn, func(tx pgx.Tx) error {
			infos, err := g.eng.NextBatches(g.ctx, tx, g.queue, g.cons[:1], 5000)
			if err != nil {
				return err
			}
			if infos[0].ID == 0 {
				return fmt.Errorf("no batch")
			}
			spec := engine.ReadSpec{Batch: infos[0].ID, Sub: g.subs[0], Subs: g.subs, N: g.n}
			for s := range g.n {
				spec.Slots = append(spec.Slots, s)
			}
			_, evs, err := g.eng.OpenRead(g.ctx, tx, spec, 100)
			if err == nil && len(evs) == 0 {
				err = fmt.Errorf("the read returned no event")
			}
			return err // rolled back: the batch stays open for the next round
		})
		if err != nil {
			t.Fatalf("a read of a group of %d slots after others on its connection: %v", g.n, err)
		}
	}
}
