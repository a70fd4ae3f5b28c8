package runner

import (
	"testing"
	"time"
)

// bound returns the bound now and the drains running.
func (d *drainTurns) bound() (now, held int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.now, d.held
}

func TestDrainTurnsFixed(t *testing.T) {
	d := newDrainTurns(2, 0)
	for i := range 2 {
		if !d.take(0) {
			t.Fatalf("a fixed bound of 2 refused turn %d", i+1)
		}
	}
	if d.take(time.Hour) {
		t.Fatal("a fixed bound of 2 gave a third turn to a drain that waited an hour")
	}
	d.give()
	select {
	case <-d.freed:
	default:
		t.Fatal("a turn given back did not signal freed")
	}
	if !d.take(0) {
		t.Fatal("a turn given back was not taken again")
	}
	if now, held := d.bound(); now != 2 || held != 2 {
		t.Fatalf("bound() = %d, %d; want 2, 2", now, held)
	}
}

func TestDrainTurnsAdaptive(t *testing.T) {
	d := newDrainTurns(4, 2)
	for i := range 2 {
		if !d.take(0) {
			t.Fatalf("an adaptive bound starting at 2 refused turn %d", i+1)
		}
	}
	if d.take(drainGrowWait - time.Millisecond) {
		t.Fatal("the bound grew for a drain that waited less than drainGrowWait")
	}
	if !d.take(drainGrowWait) {
		t.Fatal("the bound did not grow for a drain that waited drainGrowWait")
	}
	if now, held := d.bound(); now != 3 || held != 3 {
		t.Fatalf("after one growth bound() = %d, %d; want 3, 3", now, held)
	}
	if !d.take(time.Second) {
		t.Fatal("the bound did not grow to its limit of 4")
	}
	if d.take(time.Hour) {
		t.Fatal("the bound grew past its limit of 4")
	}
	// It does not shrink: turns given back are there to take at once.
	for range 4 {
		d.give()
	}
	for i := range 4 {
		if !d.take(0) {
			t.Fatalf("turn %d of the grown bound refused after every turn was given back", i+1)
		}
	}
}

func TestDrainTurnsFloorOutOfRangeIsFixed(t *testing.T) {
	for _, floor := range []int{0, -1, 3, 5} {
		d := newDrainTurns(3, floor)
		if now, _ := d.bound(); now != 3 {
			t.Errorf("newDrainTurns(3, %d) starts at %d, want 3 (fixed)", floor, now)
		}
	}
}
