package runner

import (
	"hash/maphash"
	"sync"
	"time"
)

// KeyGuard lets one handler run of a key at a time in this process, across
// every run of a worker: its slots, a slot's earlier run whose handlers are
// still returning, and the runners of both generations of a resize. Within
// one runner the lanes keep a key's runs apart, a slot run starts nothing
// before its slot's and its parent slots' earlier runs have no call in
// flight here (Calls), and across processes the leases and fences keep
// them apart; this is a safety net inside one process, which should never
// be needed: a run that would overlap another of its key waits, and the
// wait is logged with both places, so that a test fails on it (the fault
// and balance matrices count these lines) and an operator sees the path. Its zero value is ready
// to use; it is safe for concurrent use.
type KeyGuard struct {
	seed   maphash.Seed
	once   sync.Once
	shards [64]keyShard
}

type keyShard struct {
	mu   sync.Mutex
	runs map[string]Where
}

// Where names one handler run: the slot (of a generation of N slots) and
// the event.
type Where struct {
	N, Slot int
	Epoch   int64
	EventID int64
}

func (g *KeyGuard) shard(key string) *keyShard {
	g.once.Do(func() { g.seed = maphash.MakeSeed() })
	return &g.shards[maphash.String(g.seed, key)%uint64(len(g.shards))]
}

// enter waits until no other run of key is in progress in this process
// (or stop is closed: then it returns false), then records this one; leave
// must follow a true. waited is called, once, with the run being waited
// for, when enter had to wait. The wait polls (every millisecond, then up
// to every 20): it should never happen, and the path that runs every call
// then takes no allocation beyond the map's.
func (g *KeyGuard) enter(key string, w Where, stop <-chan struct{}, waited func(Where)) bool {
	sh := g.shard(key)
	pause := time.Millisecond
	for told := false; ; {
		sh.mu.Lock()
		cur, busy := sh.runs[key]
		if !busy {
			if sh.runs == nil {
				sh.runs = map[string]Where{}
			}
			sh.runs[key] = w
			sh.mu.Unlock()
			return true
		}
		sh.mu.Unlock()
		if !told && waited != nil {
			told = true
			waited(cur)
		}
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-stop:
			t.Stop()
			return false
		}
		pause = min(2*pause, 20*time.Millisecond)
	}
}

// leave ends the run of key that enter recorded.
func (g *KeyGuard) leave(key string) {
	sh := g.shard(key)
	sh.mu.Lock()
	delete(sh.runs, key)
	sh.mu.Unlock()
}
