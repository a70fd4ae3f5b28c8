package runner

import (
	"sync"
	"time"
)

// drainGrowWait is how long a drain waits for a turn, every turn taken,
// before an adaptive bound lets one more drain run at once.
const drainGrowWait = 50 * time.Millisecond

// drainTurns bounds the drains of blocked keys that run at once (each
// holds a connection while its handlers run). A fixed bound lets limit
// run; an adaptive one starts at floor and grows by one each time a drain
// has waited drainGrowWait for a turn, up to limit: a few keys blocked
// now and then keep few connections, many keys blocked at once (a skewed
// load with failures) get the drains to keep up. The bound never shrinks:
// the connections of drains no longer needed are closed by the pool when
// idle. Safe for concurrent use.
type drainTurns struct {
	mu    sync.Mutex
	held  int // turns taken, not given back
	now   int // the bound now
	limit int // the most it grows to
	freed chan struct{}
}

// newDrainTurns returns a bound of limit drains at once; with floor
// between 1 and limit, an adaptive one that starts at floor.
func newDrainTurns(limit, floor int) *drainTurns {
	limit = max(limit, 1)
	now := limit
	if floor >= 1 && floor < limit {
		now = floor
	}
	return &drainTurns{now: now, limit: limit, freed: make(chan struct{}, 1)}
}

// take takes a turn if one is free, or, once a drain has waited
// drainGrowWait, grows the bound by one for it; false: wait for freed.
func (d *drainTurns) take(waited time.Duration) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.held >= d.now {
		if waited < drainGrowWait || d.now >= d.limit {
			return false
		}
		d.now++
	}
	d.held++
	return true
}

// give gives a turn back.
func (d *drainTurns) give() {
	d.mu.Lock()
	d.held--
	d.mu.Unlock()
	signal(d.freed)
}
