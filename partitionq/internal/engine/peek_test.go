package engine_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/partitionq/partitionq/partitionq/internal/engine"
)

// A look at which slots have events in a batch names every asked slot
// with events of its own in it, keyed or keyless, or retried for its
// consumer, and no slot it was not asked about (it reads the engine's
// query without the slot and owner lists; a slot whose only event is
// another consumer's retried one may be named, which opens a batch for
// nothing and loses nothing).
func TestSlotsWithEventsNamesEveryAskedSlotWithEvents(t *testing.T) {
	pool, eng := shared.Get(t)
	ctx := context.Background()
	const queue, n = "peek", 16
	sc := eng.Schema()
	consumers := slotConsumers(n)
	newQueue(t, pool, eng, queue, consumers...)
	subs, err := eng.Subscriptions(ctx, pool, queue, "g#")
	if err != nil || len(subs) != n {
		t.Fatalf("subscriptions: %v, %v", subs, err)
	}
	subOf := map[string]int32{}
	for _, s := range subs {
		subOf[s.Consumer] = s.SubID
	}
	// Keys of slots 3 and 9, a keyless event (slot 0), and an event of
	// slot 12's key retried for slot 12's consumer.
	keyOf := map[int]string{}
	for i := 0; len(keyOf) < n; i++ {
		k := fmt.Sprintf("k-%d", i)
		s, err := engine.SlotOf(ctx, pool, k, n)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := keyOf[s]; !ok {
			keyOf[s] = k
		}
	}
	for _, s := range []int{3, 9} {
		if _, err := pool.Exec(ctx, `select `+sc+`.insert_event($1, 'e', 'd', $2, null, null, null)`, queue, keyOf[s]); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `select `+sc+`.insert_event($1, 'e', 'd', null, null, null, null)`, queue); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `select `+sc+`.insert_event_raw($1, null, now(), $2, 1, 'e', 'd', $3, null, null, null)`,
		queue, subOf[consumers[12]], keyOf[12]); err != nil {
		t.Fatal(err)
	}
	tx, info := openBatch(t, pool, eng, queue, consumers[1])
	for _, asked := range [][]int{{2, 3, 4, 12}, {0, 9, 12, 15}, {5, 6}, nil} {
		spec := engine.ReadSpec{Batch: info.ID, Sub: subOf[consumers[1]], Subs: []int32{subOf[consumers[1]]}, Slots: asked, N: n}
		for _, s := range asked {
			spec.Subs = append(spec.Subs, subOf[consumers[s]])
		}
		got, err := eng.SlotsWithEvents(ctx, tx, spec)
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(got)
		var want []int
		for _, s := range []int{0, 3, 9, 12} {
			if asked == nil || slices.Contains(asked, s) {
				want = append(want, s)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("asked about slots %v: %v have events, want %v", asked, got, want)
		}
	}
}
