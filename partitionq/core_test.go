package partitionq_test

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/partitionq/partitionq/partitionq"
)

func TestOrderAndCompleteness(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 4)
	rec := newRecorder(t)
	b.worker(t, partitionq.WorkerConfig{Handler: rec, Limits: partitionq.LimitsConfig{Concurrency: 8}})
	const keys, rounds = 200, 25
	sent := b.sendRounds(t, keys, rounds)
	rec.waitTotal(t, keys*rounds)

	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.total != keys*rounds {
		t.Fatalf("handled %d events, sent %d", rec.total, keys*rounds)
	}
	for id, n := range rec.ids {
		if n != 1 {
			t.Errorf("event %d handled %d times on the happy path", id, n)
		}
	}
	for key, want := range sent {
		if got := rec.byKey[key]; !reflect.DeepEqual(got, want) {
			t.Fatalf("key %s handled %v, sent %v", key, got, want)
		}
	}
	slotsUsed := map[int]bool{}
	for key, s := range rec.slotOf {
		want, err := b.client.SlotOf(b.ctx, key, 4)
		if err != nil {
			t.Fatal(err)
		}
		if s != want {
			t.Errorf("key %s handled on slot %d, SlotOf says %d", key, s, want)
		}
		slotsUsed[s] = true
	}
	if len(slotsUsed) != 4 {
		t.Errorf("only slots %v were used", slotsUsed)
	}
}

// Different keys are handled at once, inside one slot and across slots:
// every handler waits until all of them are inside, which only happens if
// the worker runs them in parallel (a serial worker fails the wait).
func TestKeysRunInParallel(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 2} {
		t.Run(fmt.Sprintf("slots=%d", n), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.group(t, n)
			const keys = 4
			var mu sync.Mutex
			inside := map[string]bool{}
			all, ended := make(chan struct{}), make(chan struct{})
			l := &handlingLog{decide: func(ctx context.Context, ev *partitionq.Event) error {
				mu.Lock()
				inside[ev.Key] = true
				if len(inside) == keys {
					close(all)
				}
				mu.Unlock()
				select {
				case <-all:
					return nil
				case <-ended:
					return errBoom
				case <-ctx.Done():
					return ctx.Err()
				}
			}}
			b.worker(t, partitionq.WorkerConfig{Handler: l, Limits: partitionq.LimitsConfig{Concurrency: keys, HandlerTimeout: time.Minute}})
			t.Cleanup(func() { close(ended) }) // runs before the worker's stop: let waiting handlers go
			// One transaction, so one batch per slot: a slot finishes a batch
			// before it reads the next, so events split over two batches
			// could never be inside at once.
			var ms []partitionq.Message
			for k := range keys {
				ms = append(ms, partitionq.Message{Key: fmt.Sprintf("k%d", k), Type: "T", Payload: []byte("1")})
			}
			if _, err := b.client.SendBatch(b.ctx, "q", ms); err != nil {
				t.Fatal(err)
			}
			select {
			case <-all:
			case <-time.After(30 * time.Second):
				mu.Lock()
				defer mu.Unlock()
				t.Fatalf("only %d of %d keys were ever inside the handler at once", len(inside), keys)
			}
		})
	}
}

func TestSlotOfPinned(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Pinned so that a change of hash function or of sign handling cannot
	// pass unnoticed: hashtextextended('tenant-1', 0) = -5960342201233910903,
	// whose remainder by 4 is -3 in SQL, normalized to 1.
	cases := []struct {
		key  string
		n    int
		want int
	}{
		{"tenant-1", 1, 0}, {"tenant-1", 4, 1}, {"tenant-1", 8, 1}, {"tenant-2", 4, 3}, {"acme", 16, 14},
	}
	for _, c := range cases {
		got, err := b.client.SlotOf(b.ctx, c.key, c.n)
		if err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Errorf("SlotOf(%q, %d) = %d, want %d", c.key, c.n, got, c.want)
		}
	}
}
