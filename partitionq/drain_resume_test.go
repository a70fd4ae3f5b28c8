package partitionq_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/test/pgtest"
)

// A drain of a blocked key cut short by a fault runs again only what was in
// flight: the events it handled were recorded as done as it went (the
// worker's progress flushes, and one more before it resolves them), so the
// next drain resolves them without running them. Here every session of the
// database is terminated while the drain's handler holds event 40 of the
// key's 60; the drain, its transaction lost unnoticed, goes on to the end of
// its run; every event ran once (the head twice: it failed first), and
// nothing is left behind.
func TestDrainResumesAfterAFault(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.group(t, 1)
	var mu sync.Mutex
	runs := map[int]int{}
	inside := make(chan struct{})
	release := make(chan struct{})
	h := partitionq.HandlerFunc(func(ctx context.Context, ev *partitionq.Event) error {
		seq, _ := strconv.Atoi(string(ev.Payload))
		mu.Lock()
		runs[seq]++
		n := runs[seq]
		mu.Unlock()
		switch {
		case seq == 0 && n == 1:
			return errors.New("the head fails once: the key blocks, its later events wait")
		case seq == 40 && n == 1:
			close(inside)
			<-release // outlives the fault on purpose
		}
		return nil
	})
	b.worker(t, partitionq.WorkerConfig{Handler: h, Retry: partitionq.RetryConfig{BackoffMin: 200 * time.Millisecond, BackoffMax: 200 * time.Millisecond}})
	var ms []partitionq.Message
	for i := range 60 {
		ms = append(ms, partitionq.Message{Key: "k", Type: "T", Payload: []byte(strconv.Itoa(i))})
	}
	if _, err := b.client.SendBatch(b.ctx, "q", ms); err != nil {
		t.Fatal(err)
	}
	select {
	case <-inside:
	case <-time.After(30 * time.Second):
		t.Fatal("the drain never reached event 40")
	}
	// Events 0-39 are handled; once the flushes recorded them, the fault.
	pgtest.WaitFor(t, 10*time.Second, "the drain's handled events recorded as done", func() (bool, error) {
		return b.count(t, `select count(*) from partitionq.slot_done where batch_id = 0`) == 40, nil
	})
	if _, err := b.pool.Exec(b.ctx, `select pg_terminate_backend(pid) from pg_stat_activity
		where datname = current_database() and pid <> pg_backend_pid()`); err != nil {
		t.Fatal(err)
	}
	b.pool.Reset() // the test's own sessions were terminated too
	close(release)
	pgtest.WaitFor(t, 30*time.Second, "every event handled", func() (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return runs[59] > 0, nil
	})
	pgtest.WaitFor(t, 10*time.Second, "the key unblocked, nothing left behind", func() (bool, error) {
		_, err := b.client.BlockedKey(b.ctx, "q", "g", "k")
		if !errors.Is(err, partitionq.ErrNotBlocked) {
			return false, nil
		}
		return b.count(t, `select count(*) from partitionq.slot_done`)+b.count(t, `select count(*) from pgq.retry_queue`) == 0, nil
	})
	mu.Lock()
	defer mu.Unlock()
	var wrong []string
	for i := range 60 {
		want := 1
		if i == 0 {
			want = 2
		}
		if runs[i] != want {
			wrong = append(wrong, fmt.Sprintf("event %d ran %d times, want %d", i, runs[i], want))
		}
	}
	if len(wrong) > 0 {
		t.Errorf("after a fault in a drain: %v", wrong)
	}
}
