package lanes

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestOrderPerKeyAndLimit(t *testing.T) {
	const keys, perKey, limit = 50, 40, 8
	var mu sync.Mutex
	got := map[string][]int{}
	inKey := map[string]bool{}
	var running, maxRunning atomic.Int32
	d := New(limit, 1, func(key string, items []int) {
		if len(items) != 1 {
			t.Errorf("key %s: a run of %d items, want 1 (maxRun 1)", key, len(items))
			return
		}
		item := items[0]
		n := running.Add(1)
		for {
			m := maxRunning.Load()
			if n <= m || maxRunning.CompareAndSwap(m, n) {
				break
			}
		}
		mu.Lock()
		if inKey[key] {
			t.Errorf("two items of key %s at once", key)
		}
		inKey[key] = true
		mu.Unlock()
		time.Sleep(50 * time.Microsecond) // let other keys overlap
		mu.Lock()
		inKey[key] = false
		got[key] = append(got[key], item)
		mu.Unlock()
		running.Add(-1)
	})
	for i := 0; i < perKey; i++ {
		for k := 0; k < keys; k++ {
			d.Add(fmt.Sprint("k", k), i)
		}
	}
	d.Wait()
	if len(got) != keys {
		t.Fatalf("got %d keys, want %d", len(got), keys)
	}
	for k, items := range got {
		if len(items) != perKey {
			t.Fatalf("key %s: %d items, want %d", k, len(items), perKey)
		}
		for i, v := range items {
			if v != i {
				t.Fatalf("key %s: item %d is %d: out of order", k, i, v)
			}
		}
	}
	if m := maxRunning.Load(); m > limit || m < 2 {
		t.Fatalf("max concurrent = %d, want between 2 and %d", m, limit)
	}
}

func TestBlockingKeysRunInParallel(t *testing.T) {
	// Two keys whose first items block until both are inside: proves parallelism.
	var wg sync.WaitGroup
	wg.Add(2)
	release := make(chan struct{})
	d := New(2, 1, func(string, []int) {
		wg.Done()
		<-release
	})
	d.Add("a", 1)
	d.Add("b", 1)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the two keys were never inside work at the same time")
	}
	close(release)
	d.Wait()
}

func TestWaitBelow(t *testing.T) {
	release := make(chan struct{})
	d := New(1, 1, func(string, []int) { <-release })
	for i := 0; i < 5; i++ {
		d.Add("k", i)
	}
	if p := d.Pending(); p != 5 {
		t.Fatalf("pending = %d, want 5", p)
	}
	close(release)
	d.WaitBelow(1)
	if p := d.Pending(); p != 0 {
		t.Fatalf("pending = %d after WaitBelow(1)", p)
	}
	d.Wait()
}

func TestRunsInOrderBoundedAndOneAtATimePerKey(t *testing.T) {
	const keys, perKey, limit, maxRun = 20, 100, 4, 7
	var mu sync.Mutex
	got := map[string][]int{}
	inKey := map[string]bool{}
	sizes := map[int]int{}
	release := make(chan struct{})
	d := New(limit, maxRun, func(key string, items []int) {
		<-release // the first runs wait, so later items queue behind them
		mu.Lock()
		if inKey[key] {
			t.Errorf("two runs of key %s at once", key)
		}
		inKey[key] = true
		mu.Unlock()
		if len(items) == 0 || len(items) > maxRun {
			t.Errorf("key %s: a run of %d items, want 1 to %d", key, len(items), maxRun)
		}
		mu.Lock()
		inKey[key] = false
		got[key] = append(got[key], items...)
		sizes[len(items)]++
		mu.Unlock()
	})
	for i := 0; i < perKey; i++ {
		for k := 0; k < keys; k++ {
			d.Add(fmt.Sprint("k", k), i)
		}
	}
	if p := d.Pending(); p != keys*perKey {
		t.Fatalf("pending = %d, want %d", p, keys*perKey)
	}
	close(release)
	d.Wait()
	if d.Pending() != 0 {
		t.Fatalf("pending = %d after Wait, want 0", d.Pending())
	}
	for k, items := range got {
		if len(items) != perKey {
			t.Fatalf("key %s: %d items, want %d", k, len(items), perKey)
		}
		for i, v := range items {
			if v != i {
				t.Fatalf("key %s: item %d is %d: out of order", k, i, v)
			}
		}
	}
	if sizes[maxRun] == 0 {
		t.Fatalf("no run of %d items (run sizes %v): queued items were not taken together", maxRun, sizes)
	}
}
