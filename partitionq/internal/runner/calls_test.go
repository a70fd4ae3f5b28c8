package runner

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"
)

// A slot run starts nothing while an earlier run of its slot, or of one of
// its parent slots (a resize from 4 to 8 slots: slot 5's parent is old
// slot 1), has a handler call in flight in the process; calls of other
// slots do not hold it.
func TestARunWaitsForTheCallsOfItsSlotAndItsParents(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls := &Calls{}
	r := &Runner{cfg: Config{Generation: 3, N: 8, Parent: 4, ParentGeneration: 1}, calls: calls, stop: ctx, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	s := &slotRun{r: r, slot: 5, calls: calls.counter(3, 5)}

	for _, c := range []struct {
		what             string
		generation, slot int
		holds            bool
	}{
		{"an earlier run of the slot", 3, 5, true},
		{"a run of its parent slot (generation 1: the resize that made generation 2 was aborted)", 1, 1, true},
		{"another old slot", 1, 2, false},
		{"another new slot", 3, 1, false},
		{"the same slot number of the aborted generation", 2, 5, false},
		{"the same slot number of a later generation", 4, 5, false},
	} {
		counter := calls.counter(c.generation, c.slot)
		counter.Add(1)
		done := make(chan struct{})
		go func() { s.waitRuns(); close(done) }()
		select {
		case <-done:
			if c.holds {
				t.Fatalf("%s has a call in flight, and the run did not wait", c.what)
			}
		case <-time.After(50 * time.Millisecond):
			if !c.holds {
				t.Fatalf("the run waits for %s", c.what)
			}
		}
		counter.Add(-1)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("the run still waits once %s's call returned", c.what)
		}
	}
}
