package runner

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/partitionq/partitionq/partitionq/internal/store"
)

// Calls counts the handler calls in flight in one worker process, by slot:
// a slot of a generation (its number), across
// every run of the slot in the process (a run lost whose handlers are
// still returning, the run that took the slot again) and every runner of
// the worker (both generations of a resize). A slot run starts nothing
// before every earlier run of its slot, and of its parent slots in a
// resize, has no call in flight here (slotRun.waitRuns): so two runs of a
// key never overlap inside a process, whichever path brings the key to a
// new run. Across processes the leases and fences keep them apart.
//
// A call counts itself before it checks that its slot is still active, so
// a run that waits for the counter either sees the call, or the call sees
// the slot stopped. Its zero value is ready to use; it is safe for
// concurrent use.
type Calls struct {
	mu sync.Mutex
	n  map[callsKey]*atomic.Int64
}

type callsKey struct{ generation, slot int }

// counter returns the counter of slot of generation, made on first use.
func (c *Calls) counter(generation, slot int) *atomic.Int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := callsKey{generation, slot}
	if c.n == nil {
		c.n = map[callsKey]*atomic.Int64{}
	}
	if c.n[k] == nil {
		c.n[k] = new(atomic.Int64)
	}
	return c.n[k]
}

// waitRuns waits until no earlier run of slot s, nor of its parent slots
// (a new generation's slot), has a handler call in flight in this process,
// or the worker stops. It runs before the run starts anything (load): its
// own calls are none yet.
func (s *slotRun) waitRuns() {
	r := s.r
	waits := []*atomic.Int64{s.calls}
	if r.cfg.Parent != 0 {
		for _, p := range store.Parents(r.cfg.Parent, r.cfg.N, s.slot) {
			waits = append(waits, r.calls.counter(r.cfg.ParentGeneration, p))
		}
	}
	start := time.Now()
	told := false
	pause := time.Millisecond
	for {
		busy := false
		for _, c := range waits {
			busy = busy || c.Load() != 0
		}
		if !busy || r.stop.Err() != nil {
			return
		}
		if !told && time.Since(start) > time.Second {
			told = true
			r.log.Warn("partitionq: waiting for handlers of an earlier run of the slot, or of its parent slots, to return before running it",
				slog.Int("slot", s.slot))
		}
		time.Sleep(pause)
		pause = min(2*pause, 20*time.Millisecond)
	}
}
