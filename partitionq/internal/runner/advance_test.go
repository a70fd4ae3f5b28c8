package runner

import (
	"slices"
	"testing"
	"time"
)

// The idle slots' consumers move about once per idleAdvance each, spread
// over it: a look takes only the slots behind how far they have read whose
// consumer last moved long enough ago, those that moved longest ago first;
// at a stop, every slot behind.
func TestIdleSlotsMoveSpreadOverTheSecond(t *testing.T) {
	now := time.Now()
	mk := func(slot int, pos, last int64, movedAgo time.Duration) *slotRun {
		s := &slotRun{slot: slot, pos: pos, lastTick: last}
		if movedAgo >= 0 {
			s.posAt = now.Add(-movedAgo)
		}
		return s
	}
	idle := []*slotRun{
		mk(0, 10, 20, 900*time.Millisecond), // due
		mk(1, 10, 20, 100*time.Millisecond), // moved a moment ago
		mk(2, 20, 20, 5*time.Second),        // level: nothing to move
		mk(3, 0, 20, 5*time.Second),         // where its consumer stands is not known
		mk(4, 10, 20, -1),                   // never moved: due first
		mk(5, 10, 20, 3*time.Second),        // due, before slot 0
	}
	slots := func(ss []*slotRun) []int {
		var out []int
		for _, s := range ss {
			out = append(out, s.slot)
		}
		return out
	}
	if got, want := slots(dueAdvances(idle, now, false)), []int{4, 5, 0}; !slices.Equal(got, want) {
		t.Errorf("due at a step: slots %v, want %v", got, want)
	}
	if got, want := slots(dueAdvances(idle, now, true)), []int{4, 5, 0, 1}; !slices.Equal(got, want) {
		t.Errorf("due at a stop: slots %v, want %v", got, want)
	}
	// Every slot is due within idleAdvance of its last move, looked at
	// every idleAdvanceStep: it moves at most idleAdvance + a step after.
	s := mk(0, 10, 20, 0)
	moved := time.Duration(-1)
	for d := time.Duration(0); d <= 2*idleAdvance; d += idleAdvanceStep {
		if len(dueAdvances([]*slotRun{s}, now.Add(d), false)) > 0 {
			moved = d
			break
		}
	}
	if moved < idleAdvance-idleAdvanceStep || moved > idleAdvance {
		t.Errorf("a slot that moved at 0 is due at %v, want between %v and %v", moved, idleAdvance-idleAdvanceStep, idleAdvance)
	}
}
