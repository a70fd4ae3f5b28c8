package runner

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A second run of a key waits for the first to leave, and is told which
// run it waits for; a run of another key does not wait.
func TestKeyGuardLetsOneRunOfAKeyAtATime(t *testing.T) {
	var g KeyGuard
	first := Where{N: 4, Slot: 1, Epoch: 7, EventID: 10}
	if !g.enter("k", first, nil, func(Where) { t.Fatal("the first run waited") }) {
		t.Fatal("the first run did not enter")
	}
	if !g.enter("other", Where{N: 8, Slot: 3}, nil, func(Where) { t.Fatal("a run of another key waited") }) {
		t.Fatal("a run of another key did not enter")
	}
	entered := make(chan struct{})
	var waitedFor Where
	go func() {
		g.enter("k", Where{N: 8, Slot: 5, EventID: 10}, nil, func(w Where) { waitedFor = w })
		close(entered)
	}()
	select {
	case <-entered:
		t.Fatal("a second run of the key entered while the first ran")
	case <-time.After(50 * time.Millisecond):
	}
	g.leave("k")
	<-entered
	if waitedFor != first {
		t.Fatalf("the second run was told it waits for %+v, want %+v", waitedFor, first)
	}
	g.leave("k")
	g.leave("other")
	if n := g.running(); n != 0 {
		t.Fatalf("%d keys still recorded as running after every run left", n)
	}
}

// A run that waits gives up when its stop closes (its slot was lost), and
// leaves nothing behind.
func TestKeyGuardWaitEndsWithItsStop(t *testing.T) {
	var g KeyGuard
	g.enter("k", Where{Slot: 1}, nil, nil)
	stop := make(chan struct{})
	res := make(chan bool)
	go func() { res <- g.enter("k", Where{Slot: 2}, stop, nil) }()
	close(stop)
	if <-res {
		t.Fatal("a run whose stop closed entered anyway")
	}
	g.leave("k")
	if !g.enter("k", Where{Slot: 3}, nil, func(Where) { t.Fatal("waited for a run that left") }) {
		t.Fatal("no entry after the key's run left")
	}
}

// Many runs of few keys: never two of one key at once.
func TestKeyGuardUnderContention(t *testing.T) {
	var g KeyGuard
	var mu sync.Mutex
	in := map[string]int{}
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := string(rune('a' + i%4))
			for range 200 {
				g.enter(key, Where{Slot: i}, nil, nil)
				mu.Lock()
				in[key]++
				if in[key] > 1 {
					mu.Unlock()
					t.Error("two runs of a key at once")
					return
				}
				mu.Unlock()
				mu.Lock()
				in[key]--
				mu.Unlock()
				g.leave(key)
			}
		}()
	}
	wg.Wait()
}

// The guard's cost per handler call, uncontended (each goroutine its own
// keys, as slots' keys are): go test -run '^$' -bench KeyGuard ./partitionq/internal/runner/
func BenchmarkKeyGuard(b *testing.B) {
	var g KeyGuard
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "tenant-" + string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676))
	}
	var next atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		base := int(next.Add(1)) * 64
		i := 0
		for pb.Next() {
			k := keys[(base+i%64)%len(keys)]
			g.enter(k, Where{Slot: base}, nil, nil)
			g.leave(k)
			i++
		}
	})
}

// running reports how many keys have a run in progress.
func (g *KeyGuard) running() int {
	n := 0
	for i := range g.shards {
		sh := &g.shards[i]
		sh.mu.Lock()
		n += len(sh.runs)
		sh.mu.Unlock()
	}
	return n
}
