package partitionq_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/test/pgtest"
)

// With DrainConcurrency left to its default, a worker drains more blocked
// keys at once than the 8 it starts with when many keys wait for a drain,
// and never more than DrainConcurrencyDefault; a DrainConcurrency set is a
// fixed bound. Every key's head fails once, so that each key's later events
// are set aside behind it and all its handled events run in drains, each
// for 100 ms (a drain holds its connection while they run).
func TestDrainsGrowWhenManyKeysAreBlocked(t *testing.T) {
	for _, tc := range []struct {
		name               string
		set                int // Limits.DrainConcurrency (0: the default)
		atLeast, atMost    int // drains seen running at once
		keys, eventsPerKey int
	}{
		{"default", 0, 9, partitionq.DrainConcurrencyDefault, 40, 4},
		{"fixed", 4, 1, 4, 12, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			b.group(t, 1)
			var mu sync.Mutex
			failed := map[string]bool{}
			running, most := 0, 0
			var handled atomic.Int64
			h := partitionq.HandlerFunc(func(ctx context.Context, ev *partitionq.Event) error {
				mu.Lock()
				if !failed[ev.Key] { // the key's head, the first time: its later events are set aside
					failed[ev.Key] = true
					mu.Unlock()
					return errors.New("the head fails once")
				}
				running++
				most = max(most, running)
				mu.Unlock()
				defer func() {
					mu.Lock()
					running--
					mu.Unlock()
					handled.Add(1)
				}()
				select { // an event's work; a drain holds its turn meanwhile
				case <-time.After(100 * time.Millisecond):
				case <-ctx.Done():
					return ctx.Err()
				}
				return nil
			})
			var ms []partitionq.Message
			for k := 0; k < tc.keys; k++ {
				for i := 0; i < tc.eventsPerKey; i++ {
					ms = append(ms, partitionq.Message{Key: fmt.Sprintf("tenant-%d", k), Type: "FileCreated", Payload: []byte(fmt.Sprintf(`{"seq":%d}`, i))})
				}
			}
			if _, err := b.client.SendBatch(b.ctx, "q", ms); err != nil {
				t.Fatal(err)
			}
			b.worker(t, partitionq.WorkerConfig{Handler: h,
				Retry:  partitionq.RetryConfig{BackoffMin: 20 * time.Millisecond, BackoffMax: 20 * time.Millisecond},
				Limits: partitionq.LimitsConfig{Concurrency: 64, DrainConcurrency: tc.set}})
			total := int64(tc.keys * tc.eventsPerKey)
			pgtest.WaitFor(t, 2*time.Minute, "every event handled", func() (bool, error) { return handled.Load() == total, nil })
			mu.Lock()
			defer mu.Unlock()
			if most < tc.atLeast || most > tc.atMost {
				t.Errorf("%d drains ran at once, want %d to %d (DrainConcurrency %d)", most, tc.atLeast, tc.atMost, tc.set)
			}
			t.Logf("%d keys blocked at once: at most %d drains ran at once (DrainConcurrency %d)", tc.keys, most, tc.set)
		})
	}
}
