package runner_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/partitionq/partitionq/partitionq/internal/runner"
	"github.com/partitionq/partitionq/partitionq/internal/store"
)

// A resize from 2 to 4 slots, through the runners of both generations:
// the old runner registers the new slots at the cutover and hands off an
// old slot once its last batch is done; a new slot opens no batch before
// its parent is handed off. Key k's old slot is held by a handler that
// runs until the test lets it go, so its new slot must wait, while a new
// slot whose parent is already handed off runs its keys; k's event after
// the cutover starts only after its events before it have returned.
func TestANewSlotWaitsForItsParentsHandoff(t *testing.T) {
	t.Parallel()
	g := newGroup(t, 2)
	var keys []string
	for i := range 20 {
		keys = append(keys, fmt.Sprintf("r%d", i))
	}
	slot2 := g.slotsOf(keys)
	var k, l string // k in old slot 0, l in old slot 1
	for _, x := range keys {
		if slot2[x] == 0 && k == "" {
			k = x
		}
		if slot2[x] == 1 && l == "" {
			l = x
		}
	}

	var seq atomic.Int64 // orders the starts and ends of every call of both runners
	type span struct {
		id         int64
		start, end int64
	}
	var oldK, newK, newL atomic.Pointer[span]
	gate := make(chan struct{})
	var oldRunning atomic.Bool
	oldCfg := g.config([]int{0, 1}, runner.Pause, func(ctx context.Context, c runner.Call) runner.Result {
		sp := &span{id: c.Event.ID, start: seq.Add(1)}
		if c.Event.Key == k {
			oldRunning.Store(true)
			select {
			case <-gate:
			case <-ctx.Done():
				return runner.Result{Err: ctx.Err()}
			}
			sp.end = seq.Add(1)
			oldK.Store(sp)
		}
		return runner.Result{}
	})
	old := g.start(oldCfg)
	kOld := g.send(k)[0]
	waitFor(t, "k's event runs in its old slot", oldRunning.Load)

	if _, err := store.StartResize(g.ctx, g.pool, g.eng.Schema(), g.queue, group, 4, "runner_test", "test"); err != nil {
		t.Fatal(err)
	}
	g.send("tick") // a tick that sees the resize: the cutover (its event is the old slots')
	var gen int
	waitFor(t, "the new slots are registered at the cutover", func() bool {
		var cut *int64
		if err := g.pool.QueryRow(g.ctx, `select number, cutover_tick from partitionq.generation where queue = $1 and grp = $2 and slots = 4`,
			g.queue, group).Scan(&gen, &cut); err != nil {
			t.Fatal(err)
		}
		return cut != nil
	})
	waitFor(t, "old slot 1 is handed off", func() bool { return !old.stats[1].Owned.Load() })
	if !old.stats[0].Owned.Load() {
		t.Fatalf("old slot 0 was handed off while its batch's handler runs")
	}

	// The new generation's runner, as a worker starts it at the cutover.
	ng := *g
	ng.n = 4
	ng.gen = gen
	ng.cons, ng.subs = nil, nil
	subs, err := g.eng.Subscriptions(g.ctx, g.pool, g.queue, group+"#")
	if err != nil {
		t.Fatal(err)
	}
	bySub := map[string]int32{}
	for _, s := range subs {
		bySub[s.Consumer] = s.SubID
	}
	for s := range 4 {
		c := fmt.Sprintf("%s#%d/4", group, s)
		ng.cons, ng.subs = append(ng.cons, c), append(ng.subs, bySub[c])
		if bySub[c] == 0 {
			t.Fatalf("new consumer %s is not registered: %+v", c, subs)
		}
	}
	newCfg := ng.config([]int{0, 1, 2, 3}, runner.Pause, func(_ context.Context, c runner.Call) runner.Result {
		sp := &span{id: c.Event.ID, start: seq.Add(1)}
		sp.end = seq.Add(1)
		switch c.Event.Key {
		case k:
			newK.Store(sp)
		case l:
			newL.Store(sp)
		}
		return runner.Result{}
	})
	newCfg.Parent, newCfg.ParentGeneration, newCfg.ParentSubs = 2, g.gen, g.subs
	ng.start(newCfg)
	ids := g.send(k, l)
	kNew, lNew := ids[0], ids[1]
	waitFor(t, "l's event runs in its new slot (its parent is handed off)", func() bool { return newL.Load() != nil })
	if sp := newL.Load(); sp.id != lNew {
		t.Errorf("l's new slot ran event %d, want %d", sp.id, lNew)
	}
	if sp := newK.Load(); sp != nil {
		t.Fatalf("k's event %d ran in its new slot while its event %d still runs in its old one", sp.id, kOld)
	}

	close(gate)
	waitFor(t, "k's event after the cutover runs", func() bool { return newK.Load() != nil })
	o, n := oldK.Load(), newK.Load()
	if o == nil || o.id != kOld || n.id != kNew || n.start < o.end {
		t.Errorf("k: old run %+v, new run %+v; want event %d to return before event %d starts", o, n, kOld, kNew)
	}
	waitFor(t, "old slot 0 is handed off", func() bool { return !old.stats[0].Owned.Load() })
}
