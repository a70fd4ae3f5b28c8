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

// Handlers that query the database through the pool the client was given
// (the common case) never wait on the worker's own connections: a worker
// holding a transaction per slot and per blocked key being drained, each
// waiting on a handler, must not be able to starve those handlers of a
// connection. The pool here is as small as a pool can be (one connection),
// and many keys block at once, so every drain runs while handlers need the
// pool.
func TestHandlersSharingThePoolNeverStarve(t *testing.T) {
	t.Parallel()
	b := setupPool(t, 1)
	pool := b.pool
	b.group(t, 2)

	const keys, perKey = 24, 4
	var mu sync.Mutex
	failed := map[string]bool{}
	var timedOut atomic.Int64
	l := &handlingLog{decide: func(ctx context.Context, ev *partitionq.Event) error {
		if _, err := pool.Exec(ctx, `select 1`); err != nil {
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				timedOut.Add(1)
			}
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if !failed[ev.Key] { // every key's first event fails once: every key blocks
			failed[ev.Key] = true
			return errBoom
		}
		return nil
	}}
	b.worker(t, partitionq.WorkerConfig{
		Handler: l,
		Retry:   partitionq.RetryConfig{BackoffMin: 5 * time.Millisecond, BackoffMax: 20 * time.Millisecond},
		Limits:  partitionq.LimitsConfig{Concurrency: 8, DrainConcurrency: 8, HandlerTimeout: 5 * time.Second},
	})
	var ms []partitionq.Message
	for i := range perKey {
		for k := range keys {
			ms = append(ms, partitionq.Message{Key: fmt.Sprintf("k%d", k), Payload: []byte(fmt.Sprint(i))})
		}
	}
	if _, err := b.client.SendBatch(b.ctx, "q", ms); err != nil {
		t.Fatal(err)
	}
	for k := range keys {
		key := fmt.Sprintf("k%d", k)
		pgtest.WaitFor(t, 60*time.Second, "the events of "+key, func() (bool, error) {
			if n := timedOut.Load(); n > 0 {
				return false, fmt.Errorf("%d handler calls waited their whole timeout for a pool connection", n)
			}
			return len(l.okSeq(key)) >= perKey, nil
		})
		if got, want := fmt.Sprint(l.okSeq(key)), "[0 1 2 3]"; got != want {
			t.Fatalf("%s handled as %s, want %s", key, got, want)
		}
	}
}
