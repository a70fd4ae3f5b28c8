package bench

import (
	"errors"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/partitionq/partitionq/internal/ordercheck"
)

// errFailOnce is what the handler returns for the first attempt of an
// event marked to fail once.
var errFailOnce = errors.New("pqbench: this event fails on its first attempt")

type logEntry struct {
	idx int32
	ok  bool
}

// Recorder is the handler's bookkeeping for one run: the handling log in
// the order the calls ended, completion, overlaps (two calls of one key at
// once) and, when asked, latencies. It is safe for concurrent use and cheap
// enough (a few atomic operations a call) not to weigh on a no-op handler.
type Recorder struct {
	wl *Workload

	log      []logEntry
	next     atomic.Int64
	mu       sync.Mutex
	overflow []logEntry

	done      []atomic.Bool
	failed    []atomic.Bool
	inflight  []atomic.Int32
	overlaps  atomic.Int64
	remaining atomic.Int64
	finished  chan struct{}
	lastNS    atomic.Int64

	sentNS []atomic.Int64 // latency runs: when each event was sent
	latNS  []atomic.Int64 // latency runs: first handler entry minus send
}

// NewRecorder returns a recorder for wl; withLatency adds the latency arrays.
func NewRecorder(wl *Workload, withLatency bool) *Recorder {
	n := len(wl.Events)
	r := &Recorder{wl: wl, log: make([]logEntry, 2*n+1024), done: make([]atomic.Bool, n), failed: make([]atomic.Bool, n),
		inflight: make([]atomic.Int32, len(wl.Keys)), finished: make(chan struct{})}
	r.remaining.Store(int64(n))
	if n == 0 {
		close(r.finished)
	}
	if withLatency {
		r.sentNS = make([]atomic.Int64, n)
		r.latNS = make([]atomic.Int64, n)
	}
	return r
}

// Handle is the benchmark's handler for event idx: it waits wait (the
// workload's handler cost), fails the first attempt of an event marked to
// fail once, and logs the call.
func (r *Recorder) Handle(idx int, wait time.Duration) error {
	e := &r.wl.Events[idx]
	if r.latNS != nil {
		if sent := r.sentNS[idx].Load(); sent != 0 {
			r.latNS[idx].CompareAndSwap(0, time.Now().UnixNano()-sent)
		}
	}
	in := &r.inflight[e.KeyIdx]
	if in.Add(1) > 1 {
		r.overlaps.Add(1)
	}
	defer in.Add(-1)
	if wait > 0 {
		time.Sleep(wait)
	}
	if e.Fail && r.failed[idx].CompareAndSwap(false, true) {
		r.append(logEntry{idx: int32(idx), ok: false})
		return errFailOnce
	}
	r.append(logEntry{idx: int32(idx), ok: true})
	if r.done[idx].CompareAndSwap(false, true) {
		if r.remaining.Add(-1) == 0 {
			r.lastNS.Store(time.Now().UnixNano())
			close(r.finished)
		}
	}
	return nil
}

func (r *Recorder) append(e logEntry) {
	i := r.next.Add(1) - 1
	if i < int64(len(r.log)) {
		r.log[i] = e
		return
	}
	r.mu.Lock()
	r.overflow = append(r.overflow, e)
	r.mu.Unlock()
}

// sentBetween counts the events marked sent at or after from and before
// to (latency runs).
func (r *Recorder) sentBetween(from, to time.Time) int {
	a, z := from.UnixNano(), to.UnixNano()
	n := 0
	for i := range r.sentNS {
		if t := r.sentNS[i].Load(); t >= a && t < z {
			n++
		}
	}
	return n
}

// MarkSent records when event idx was sent (latency runs).
func (r *Recorder) MarkSent(idx int, at time.Time) { r.sentNS[idx].Store(at.UnixNano()) }

// Finished is closed when every event has been handled successfully.
func (r *Recorder) Finished() <-chan struct{} { return r.finished }

// Wait waits until every event is handled or timeout passes; it reports
// whether all were.
func (r *Recorder) Wait(timeout time.Duration) bool {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-r.finished:
		return true
	case <-t.C:
		return false
	}
}

// Elapsed is the time from start to the last event handled (to now when
// not all were).
func (r *Recorder) Elapsed(start time.Time) time.Duration {
	if ns := r.lastNS.Load(); ns != 0 {
		return time.Unix(0, ns).Sub(start)
	}
	return time.Since(start)
}

// Handled counts the events handled successfully so far.
func (r *Recorder) Handled() int { return len(r.wl.Events) - int(r.remaining.Load()) }

// Overlaps counts handler calls that started while another call of the
// same key was running.
func (r *Recorder) Overlaps() int64 { return r.overlaps.Load() }

// Check runs the shared order checker on the log.
func (r *Recorder) Check() ordercheck.Report {
	n := min(r.next.Load(), int64(len(r.log)))
	hs := make([]ordercheck.Handling, 0, int(n)+len(r.overflow))
	add := func(e logEntry) {
		ev := &r.wl.Events[e.idx]
		hs = append(hs, ordercheck.Handling{Key: ev.Key, Seq: ev.Seq, OK: e.ok})
	}
	for _, e := range r.log[:n] {
		add(e)
	}
	r.mu.Lock()
	for _, e := range r.overflow {
		add(e)
	}
	r.mu.Unlock()
	return ordercheck.Check(r.wl.PerKey, hs, nil)
}

// Latency summarizes send-to-handler latencies.
type Latency struct {
	Count              int
	P50, P90, P99, Max time.Duration
}

func latencyOf(ds []time.Duration) *Latency {
	if len(ds) == 0 {
		return &Latency{}
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	q := func(p float64) time.Duration { return ds[min(len(ds)-1, int(p*float64(len(ds))))] }
	return &Latency{Count: len(ds), P50: q(0.50), P90: q(0.90), P99: q(0.99), Max: ds[len(ds)-1]}
}

// latencyBetween is the latency summary of the events sent at or after
// from and before to (latency runs).
func (r *Recorder) latencyBetween(from, to time.Time) *Latency {
	a, z := from.UnixNano(), to.UnixNano()
	var ds []time.Duration
	for i := range r.latNS {
		if s := r.sentNS[i].Load(); s >= a && s < z {
			if v := r.latNS[i].Load(); v != 0 {
				ds = append(ds, time.Duration(v))
			}
		}
	}
	return latencyOf(ds)
}

// Latency returns the latency summary of the events handled (latency runs).
func (r *Recorder) Latency() *Latency {
	var ds []time.Duration
	for i := range r.latNS {
		if v := r.latNS[i].Load(); v != 0 {
			ds = append(ds, time.Duration(v))
		}
	}
	return latencyOf(ds)
}
