// Package lanes runs work grouped by key: the items of one key strictly one
// run at a time in the order they were added, items of different keys
// concurrently, at most a fixed number of runs at once. A run is up to a
// bound of the items its key has queued when the run starts, in order (a
// run never waits for more). After each run its key goes to the back of
// the ready list, so keys are served round-robin.
package lanes

import "sync"

type lane[T any] struct {
	key    string
	items  []T
	active bool // an item of this lane is being worked on
	queued bool // the lane is in the ready list
}

// Dispatcher is safe for concurrent use. Add items, then call Close and Wait.
type Dispatcher[T any] struct {
	limit int
	run   int // the most items of a run
	work  func(key string, items []T)

	mu      sync.Mutex
	wake    *sync.Cond // workers wait here for a ready lane
	space   *sync.Cond // WaitBelow waits here for pending to drop
	below   int        // the smallest bound a WaitBelow waits for (0: none waits)
	lanes   map[string]*lane[T]
	ready   []*lane[T]
	free    []*lane[T] // lanes of keys with nothing queued, kept for the next keys (their items' room too)
	pending int        // added, not yet worked
	workers int
	active  int // lanes being worked on
	closed  bool
	wg      sync.WaitGroup
}

// New returns a dispatcher that calls work with runs of a key's items: at
// most maxRun of them (maxRun < 1 counts as 1), those queued when the run
// starts, in the order they were added; a key's next run starts after its
// last one returned. At most limit calls run at once (limit < 1 counts as
// 1). work must not keep the slice: it is the calling goroutine's, used
// again for its next run.
func New[T any](limit, maxRun int, work func(key string, items []T)) *Dispatcher[T] {
	d := &Dispatcher[T]{limit: max(limit, 1), run: max(maxRun, 1), work: work, lanes: map[string]*lane[T]{}}
	d.wake = sync.NewCond(&d.mu)
	d.space = sync.NewCond(&d.mu)
	return d
}

// Add queues item behind the earlier items of key.
func (d *Dispatcher[T]) Add(key string, item T) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.addLocked(key, item)
}

// AddAll queues items[i] behind the earlier items of keys[i], in order,
// at once: a key's items added together are there together when a run
// of it starts, and the lock is taken once.
func (d *Dispatcher[T]) AddAll(keys []string, items []T) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, key := range keys {
		d.addLocked(key, items[i])
	}
}

func (d *Dispatcher[T]) addLocked(key string, item T) {
	if d.closed {
		panic("lanes: Add after Close")
	}
	l := d.lanes[key]
	if l == nil {
		if k := len(d.free); k > 0 {
			l = d.free[k-1]
			d.free[k-1] = nil
			d.free = d.free[:k-1]
			l.key = key
		} else {
			l = &lane[T]{key: key}
		}
		d.lanes[key] = l
	}
	l.items = append(l.items, item)
	d.pending++
	if !l.active && !l.queued {
		l.queued = true
		d.ready = append(d.ready, l)
		if d.workers < d.limit && d.workers < len(d.ready)+d.active {
			d.workers++
			d.wg.Add(1)
			go d.worker()
		} else {
			d.wake.Signal()
		}
	}
}

// Pending returns how many added items have not finished.
func (d *Dispatcher[T]) Pending() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.pending
}

// WaitBelow blocks until fewer than n items are pending.
func (d *Dispatcher[T]) WaitBelow(n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for d.pending >= n {
		if d.below == 0 || n < d.below {
			d.below = n
		}
		d.space.Wait()
	}
}

// Close says no more items come; Wait then returns once all are worked.
func (d *Dispatcher[T]) Close() {
	d.mu.Lock()
	d.closed = true
	d.wake.Broadcast()
	d.mu.Unlock()
}

// Wait closes the dispatcher and waits until every item has been worked.
func (d *Dispatcher[T]) Wait() {
	d.Close()
	d.wg.Wait()
}

// freeMax bounds the lanes kept for reuse.
const freeMax = 1024

func (d *Dispatcher[T]) worker() {
	defer d.wg.Done()
	var buf []T // the worker's runs, one after another
	d.mu.Lock()
	for {
		for len(d.ready) == 0 && !d.closed {
			d.wake.Wait()
		}
		if len(d.ready) == 0 {
			d.workers--
			d.mu.Unlock()
			return
		}
		l := d.ready[0]
		d.ready[0] = nil
		d.ready = d.ready[1:]
		l.queued = false
		l.active = true
		d.active++
		n := min(len(l.items), d.run)
		if cap(buf) < n {
			buf = make([]T, n)
		}
		run := buf[:n]
		copy(run, l.items)
		if n == len(l.items) {
			clear(l.items)
			l.items = l.items[:0] // its room is kept for the key's next items
		} else {
			clear(l.items[:n])
			l.items = l.items[n:]
		}
		d.mu.Unlock()

		d.work(l.key, run)
		clear(run) // the items are the caller's: keep none of them alive

		d.mu.Lock()
		d.pending -= n
		l.active = false
		d.active--
		if len(l.items) > 0 {
			l.queued = true
			d.ready = append(d.ready, l)
		} else {
			delete(d.lanes, l.key)
			if len(d.free) < freeMax {
				l.key = ""
				d.free = append(d.free, l)
			}
		}
		if d.below > 0 && d.pending < d.below {
			d.below = 0
			d.space.Broadcast()
		}
	}
}
